"""python -m ptc LIB.so...: print each library's inputs, outputs and symbols."""
import sys

from . import load

for path in sys.argv[1:]:
    m = load(path)
    print(m)
    m.close()
