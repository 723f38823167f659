/* Helpers shared by the libFuzzer harnesses (tests/fuzz/fuzz_*.c).
 *
 * Every harness defines LLVMFuzzerTestOneInput and feeds the bytes to one
 * parser of outside input through the same entry point the runtime uses.  The
 * contract under test is STYLE.md rule 5: bad input is an error code with a
 * message, never a crash, a hang, a leak or a silent wrong answer.  Where a
 * parser accepts an input the harness also checks what it promised (ranges in
 * bounds, values in range) and traps when a promise is broken, so a logic bug
 * shows up as a crash the fuzzer keeps. */
#ifndef TL_FUZZ_UTIL_H
#define TL_FUZZ_UTIL_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* A NUL-terminated heap copy of the input (parsers of text take C strings).
 * Embedded NULs simply end the string early, as they would from a file read
 * with file_read_all. */
static inline char *fuzz_cstr(const uint8_t *data, size_t size) {
    char *s = malloc(size + 1);
    if (!s) abort();
    memcpy(s, data, size);
    s[size] = '\0';
    return s;
}

/* A promise the parser made on success does not hold: crash so the fuzzer
 * records the input. */
#define FUZZ_ASSERT(cond)                                                         \
    do {                                                                          \
        if (!(cond)) __builtin_trap();                                            \
    } while (0)

#endif
