/* bp_atom_syntax.h -- Erlang's reserved words, the one list that decides
 * whether an otherwise plain atom is written quoted ('receive'), shared by
 * the tracer's renderer (bp_term.c) and the reader's name forms
 * (cli/bp_names.c), so that both write a name the same way.
 *
 * The words io_lib quotes on OTP 25 (erl_scan:reserved_word/1 without the
 * maybe_expr feature: `maybe' and `else' are plain atoms there).  Any
 * thread; no state.
 */
#ifndef BP_ATOM_SYNTAX_H
#define BP_ATOM_SYNTAX_H

#include <stddef.h>
#include <string.h>

static const struct {
	unsigned char n;
	char s[8];
} bp_atom_reserved_words[] = {
#define BP__R(w) {sizeof(w) - 1, w}
	BP__R("after"), BP__R("and"),	 BP__R("andalso"), BP__R("band"),
	BP__R("begin"), BP__R("bnot"),	 BP__R("bor"),	   BP__R("bsl"),
	BP__R("bsr"),	BP__R("bxor"),	 BP__R("case"),	   BP__R("catch"),
	BP__R("cond"),	BP__R("div"),	 BP__R("end"),	   BP__R("fun"),
	BP__R("if"),	BP__R("let"),	 BP__R("not"),	   BP__R("of"),
	BP__R("or"),	BP__R("orelse"), BP__R("rem"),	   BP__R("try"),
	BP__R("when"),	BP__R("receive"), BP__R("xor"),
#undef BP__R
};

/* Whether the n bytes at s are a reserved word (then quoted as an atom). */
static inline int bp_atom_reserved(const char *s, size_t n)
{
	if (n < 2 || n > 7)
		return 0;
	for (size_t i = 0; i < sizeof bp_atom_reserved_words /
				       sizeof bp_atom_reserved_words[0];
	     i++)
		if (bp_atom_reserved_words[i].n == n &&
		    bp_atom_reserved_words[i].s[0] == s[0] &&
		    !memcmp(bp_atom_reserved_words[i].s, s, n))
			return 1;
	return 0;
}

#endif /* BP_ATOM_SYNTAX_H */
