#include "blob_object.h"

#include <elf.h>

#include <cstring>
#include <fstream>
#include <vector>

#include "ptc/error.h"

namespace ptc {

namespace {

#if defined(__x86_64__)
constexpr Elf64_Half kMachine = EM_X86_64;
#elif defined(__aarch64__)
constexpr Elf64_Half kMachine = EM_AARCH64;
#else
constexpr Elf64_Half kMachine = EM_NONE;
#endif

template <class T>
void put(std::string& out, const T& v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}

void pad_to(std::string& out, uint64_t base, uint64_t align) {
  while ((base + out.size()) % align) out.push_back('\0');
}

}  // namespace

bool can_write_blob_object() { return kMachine != EM_NONE; }

void write_blob_object(const std::string& path, const std::string& symbol,
                       const std::function<void(const std::function<void(const unsigned char*, size_t)>&)>& fill) {
  std::ofstream f(path, std::ios::binary);
  // The header is rewritten at the end, once the section headers' offset is known.
  Elf64_Ehdr eh{};
  f.write(reinterpret_cast<const char*>(&eh), sizeof eh);
  const uint64_t data_off = sizeof eh;  // 64: the blob's alignment
  uint64_t n = 0;
  fill([&](const unsigned char* p, size_t k) {
    f.write(reinterpret_cast<const char*>(p), static_cast<std::streamsize>(k));
    n += k;
  });
  f.put('\0');  // a zero byte after the blob, as the assembler path has (an empty blob still has a symbol)
  const uint64_t data_size = n + 1;

  // Sections: 0 null, 1 .rodata, 2 .note.GNU-stack (no executable stack), 3 .symtab, 4 .strtab,
  // 5 .shstrtab.
  const std::string shstr = std::string("\0.rodata\0.note.GNU-stack\0.symtab\0.strtab\0.shstrtab\0", 51);
  const Elf64_Word n_rodata = 1, n_note = 9, n_symtab = 25, n_strtab = 33, n_shstrtab = 41;
  const std::string strtab = std::string(1, '\0') + symbol + std::string(1, '\0');

  std::string tail;  // everything after the blob, from offset data_off + data_size
  const uint64_t tail_off = data_off + data_size;
  pad_to(tail, tail_off, 8);
  const uint64_t symtab_off = tail_off + tail.size();
  Elf64_Sym null_sym{}, sym{};
  sym.st_name = 1;
  sym.st_info = ELF64_ST_INFO(STB_GLOBAL, STT_OBJECT);
  sym.st_other = STV_HIDDEN;
  sym.st_shndx = 1;
  sym.st_value = 0;
  sym.st_size = n;
  put(tail, null_sym);
  put(tail, sym);
  const uint64_t strtab_off = tail_off + tail.size();
  tail += strtab;
  const uint64_t shstrtab_off = tail_off + tail.size();
  tail += shstr;
  pad_to(tail, tail_off, 8);
  const uint64_t sh_off = tail_off + tail.size();
  auto section = [&](Elf64_Word name, Elf64_Word type, Elf64_Xword flags, uint64_t off, uint64_t size, Elf64_Word link,
                     Elf64_Word info, Elf64_Xword align, Elf64_Xword entsize) {
    Elf64_Shdr sh{};
    sh.sh_name = name;
    sh.sh_type = type;
    sh.sh_flags = flags;
    sh.sh_offset = off;
    sh.sh_size = size;
    sh.sh_link = link;
    sh.sh_info = info;
    sh.sh_addralign = align;
    sh.sh_entsize = entsize;
    put(tail, sh);
  };
  section(0, SHT_NULL, 0, 0, 0, 0, 0, 0, 0);
  section(n_rodata, SHT_PROGBITS, SHF_ALLOC, data_off, data_size, 0, 0, 64, 0);
  section(n_note, SHT_PROGBITS, 0, tail_off, 0, 0, 0, 1, 0);
  section(n_symtab, SHT_SYMTAB, 0, symtab_off, 2 * sizeof(Elf64_Sym), 4, 1, 8, sizeof(Elf64_Sym));  // info: first global
  section(n_strtab, SHT_STRTAB, 0, strtab_off, strtab.size(), 0, 0, 1, 0);
  section(n_shstrtab, SHT_STRTAB, 0, shstrtab_off, shstr.size(), 0, 0, 1, 0);
  f.write(tail.data(), static_cast<std::streamsize>(tail.size()));

  std::memcpy(eh.e_ident, ELFMAG, SELFMAG);
  eh.e_ident[EI_CLASS] = ELFCLASS64;
  eh.e_ident[EI_DATA] = ELFDATA2LSB;
  eh.e_ident[EI_VERSION] = EV_CURRENT;
  eh.e_ident[EI_OSABI] = ELFOSABI_NONE;
  eh.e_type = ET_REL;
  eh.e_machine = kMachine;
  eh.e_version = EV_CURRENT;
  eh.e_shoff = sh_off;
  eh.e_ehsize = sizeof(Elf64_Ehdr);
  eh.e_shentsize = sizeof(Elf64_Shdr);
  eh.e_shnum = 6;
  eh.e_shstrndx = 5;
  f.seekp(0);
  f.write(reinterpret_cast<const char*>(&eh), sizeof eh);
  f.close();
  if (!f) user_error(path, ": cannot write the weights object");
}

}  // namespace ptc
