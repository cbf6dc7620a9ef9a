# Turns one .spv file into a C++ source holding its 32-bit words (run by cmake/shaders.cmake).
file(READ ${SPV} hex HEX)
string(LENGTH "${hex}" n)
math(EXPR words "${n} / 8")
# SPIR-V is little-endian on every target we build for: regroup each 4 bytes into one word.
string(REGEX REPLACE "([0-9a-f][0-9a-f])([0-9a-f][0-9a-f])([0-9a-f][0-9a-f])([0-9a-f][0-9a-f])"
       "0x\\4\\3\\2\\1u," body "${hex}")
file(WRITE ${OUT} "// Generated from ${NAME}.spv\n#include <cstddef>\n#include <cstdint>\nnamespace vkf::vk::embedded {\nextern const uint32_t ${NAME}_words[] = {${body}};\nextern const size_t ${NAME}_size = ${words};\n}\n")
