/* bp_float.h -- shortest round-trip text of a float (bp_float.c). */
#ifndef BP_FLOAT_H
#define BP_FLOAT_H

#include <stddef.h>

#define BP_FLOAT_TEXT 48 /* room for any double's text and the NUL */

/* Writes v as float_to_list(v, [short]) does in OTP 25 ("1.0", "0.1",
 * "1.0e100", "-0.0") into b, NUL-terminated; returns the length.  v must
 * be finite (Erlang floats are). */
size_t bp_float_text(double v, char b[BP_FLOAT_TEXT]);

#endif /* BP_FLOAT_H */
