/* bp_elixir.h -- captured Erlang-syntax term text re-rendered in Elixir
 * syntax, as Elixir's inspect/2 prints the term (Elixir 1.14).
 *
 * The tracer captures terms as bounded Erlang-syntax text (bp_term.c);
 * the trace reader (`beamprobe print --syntax elixir', c_src/cli) and the
 * shell printer (src/beamprobe_printer.erl, through the NIF
 * beamprobe_nif:elixir_text/2) turn that text into Elixir syntax at
 * display time: nothing changes at capture, and a trace written once reads
 * in either syntax.  Plain C, no allocation but one scratch block per call
 * (malloc, O(input)), no dependency on erl_nif.h.
 *
 *   'Elixir.Shop':buy/2 + (apple, 2)  ->  Shop.buy(:apple, 2)
 *   #{'__struct__' => 'Elixir.Shop.Order',id => 1}  ->  %Shop.Order{id: 1}
 *   <<"hÃ©llo">> (the UTF-8 bytes of "héllo")  ->  "héllo"
 *   <0.123.0>  ->  #PID<0.123.0>      "abc"  ->  'abc'
 *   [{a,1},{b,2}]  ->  [a: 1, b: 2]   #{a => 1}  ->  %{a: 1}
 *
 * The cut markers of bounded capture survive: [1,2|...] -> [1, 2, ...],
 * <<"abc"...>> -> "abc" <> ..., "abc"... -> 'abc' ++ ..., a text cut by
 * the byte limit ends in "..." as it did.  Where the capture only saw a
 * part of a term the decision (keyword list? printable?) is made on that
 * part, as the capture itself does.  Known differences from inspect/2
 * (docs/elixir.md): a struct prints its fields in key order (inspect uses
 * the definition order) and the capture's `list' limit counts the
 * __struct__ key; the `list' limit applies to each container (inspect's
 * `limit' is shared by nested ones); funs print as #Function<I.U in :m>
 * (the capture keeps no arity or name); a map of more than 32 keys keeps
 * the capture's key order; structs with their own Inspect
 * implementation (Date, MapSet, ...) print as plain structs; an atom's
 * letters beyond Latin-1 are judged by their Unicode block
 * (bp_elixir_ident.h: mixed scripts such as :"alpha_β" and restricted
 * letters such as :"ǅ" are quoted as inspect/2 quotes them), so a
 * letter followed by a combining mark, µ, and code points a block leaves
 * unassigned may differ; a text that is not captured Erlang syntax is
 * copied unchanged.
 */
#ifndef BP_ELIXIR_H
#define BP_ELIXIR_H

#include <stddef.h>

enum bp_elixir_kind {
	BP_ELIXIR_TERM, /* one term: "{ok,<<\"a\">>}" */
	BP_ELIXIR_ARGS, /* an argument list: "(1, [a])" */
	BP_ELIXIR_MFA,  /* "m:f/2" or "m:f" -> "M.f/2" */
	BP_ELIXIR_NAME  /* a registered name: 'Elixir.Shop.Srv' -> Shop.Srv,
			   any other atom unchanged */
};

/*
 * Writes the Elixir text of the n bytes at in (of the given kind) into
 * out, NUL-terminated, at most cap bytes with the NUL (cap >= 4); returns
 * its length.  Text that does not fit ends in "...".  Never fails: input
 * it cannot read is copied as it is; with no memory the input is copied.
 */
size_t bp_elixir_text(const char *in, size_t n, enum bp_elixir_kind kind,
		      char *out, size_t cap);

/* An output size that holds the Elixir text of n input bytes uncut. */
#define BP_ELIXIR_CAP(n) (5 * (n) + 64) /* "255, " per input byte */

#endif
