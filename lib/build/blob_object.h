// A relocatable ELF object holding one read-only blob under one hidden symbol: the weights linked
// into a library, written directly instead of through the assembler's .incbin (which copies the
// whole blob once more; BERT's 440 MB took the assembler 1.8 s).
#pragma once

#include <cstddef>
#include <functional>
#include <string>

namespace ptc {

// Whether this ptc can write objects for the host (x86-64 or AArch64 ELF); elsewhere the build
// assembles a .incbin.
bool can_write_blob_object();

// Writes `path`: section .rodata (64-byte aligned) with the bytes `fill` passes to its sink and
// one zero byte after them, and the hidden global object `symbol` at its start. Throws UserError
// when the file cannot be written.
void write_blob_object(const std::string& path, const std::string& symbol,
                       const std::function<void(const std::function<void(const unsigned char*, size_t)>&)>& fill);

}  // namespace ptc
