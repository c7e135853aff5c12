/* bp_elixir_ident.h -- which atoms Elixir 1.14 writes unquoted, beyond
 * Latin-1: the identifier rules of Elixir's tokenizer (Unicode UAX #31,
 * with the UTS #39 "highly restrictive" rule on scripts), approximated by
 * Unicode blocks.  Included by bp_elixir.c only.
 *
 * A name beyond ASCII is an identifier when each of its characters is a
 * letter (or a mark, a digit after the first) of a script Elixir accepts,
 * and all of them share one script -- Han with Hiragana and Katakana
 * (Japanese), with Bopomofo (Chinese) or with Hangul (Korean) count as
 * one -- or they are Latin and one of those three (:日本a, :アー).
 * :"яa", :"λx_1", :"Привет日" are quoted; :привет, :日本語, :αβ are not.
 *
 * The table gives each block of a recommended script its script set: a
 * character is taken to be what its block is.  Where Unicode says
 * otherwise -- a code point the block leaves unassigned, a letter UTS #39
 * restricts (archaic, technical: ĳ, ŀ, ſ and ǅ are listed), a character
 * of several scripts (Script_Extensions), a name not in NFC -- the
 * printer may write unquoted what inspect/2 quotes (docs/elixir.md lists
 * the cases; test/elixir/atoms_test.exs counts them).  Exact agreement
 * needs Unicode's identifier and script tables (about 1,100 ranges).
 */
#ifndef BP_ELIXIR_IDENT_H
#define BP_ELIXIR_IDENT_H

#include <stddef.h>
#include <stdint.h>

enum {
	BP_SC_LATN = 1u << 0, BP_SC_GREK = 1u << 1, BP_SC_CYRL = 1u << 2,
	BP_SC_ARMN = 1u << 3, BP_SC_HEBR = 1u << 4, BP_SC_ARAB = 1u << 5,
	BP_SC_THAA = 1u << 6, BP_SC_DEVA = 1u << 7, BP_SC_BENG = 1u << 8,
	BP_SC_GURU = 1u << 9, BP_SC_GUJR = 1u << 10, BP_SC_ORYA = 1u << 11,
	BP_SC_TAML = 1u << 12, BP_SC_TELU = 1u << 13, BP_SC_KNDA = 1u << 14,
	BP_SC_MLYM = 1u << 15, BP_SC_SINH = 1u << 16, BP_SC_THAI = 1u << 17,
	BP_SC_LAOO = 1u << 18, BP_SC_TIBT = 1u << 19, BP_SC_MYMR = 1u << 20,
	BP_SC_GEOR = 1u << 21, BP_SC_ETHI = 1u << 22, BP_SC_KHMR = 1u << 23,
	/* the East Asian sets: Han is in all three */
	BP_SC_JPAN = 1u << 24, BP_SC_HANB = 1u << 25, BP_SC_KORE = 1u << 26,
	BP_SC_HANI = 1u << 27
};

#define BP_SC_ALL 0xFFFFFFFFu /* Common, Inherited: any script */
#define BP_SC_HAN (BP_SC_HANI | BP_SC_JPAN | BP_SC_HANB | BP_SC_KORE)

/* Ranges (first, last, script set, 1 if it may start a name), sorted;
 * a code point in none is not in a name. */
struct bp_sc_range {
	uint32_t lo, hi, set;
	int start;
};

static const struct bp_sc_range bp_sc_ranges[] = {
	{0x0100, 0x0131, BP_SC_LATN, 1}, {0x0134, 0x013E, BP_SC_LATN, 1},
	{0x0141, 0x0148, BP_SC_LATN, 1}, {0x014A, 0x017E, BP_SC_LATN, 1},
	{0x018F, 0x018F, BP_SC_LATN, 1}, {0x01A0, 0x01A1, BP_SC_LATN, 1},
	{0x01AF, 0x01B0, BP_SC_LATN, 1}, {0x01CD, 0x01DC, BP_SC_LATN, 1},
	{0x01DE, 0x01E3, BP_SC_LATN, 1}, {0x01E6, 0x01F0, BP_SC_LATN, 1},
	{0x01F4, 0x01F5, BP_SC_LATN, 1}, {0x01F8, 0x021B, BP_SC_LATN, 1},
	{0x021E, 0x021F, BP_SC_LATN, 1}, {0x0226, 0x0233, BP_SC_LATN, 1},
	{0x0259, 0x0259, BP_SC_LATN, 1}, {0x02BB, 0x02BC, BP_SC_ALL, 1},
	{0x02EC, 0x02EC, BP_SC_ALL, 1}, {0x0300, 0x036F, BP_SC_ALL, 0},
	{0x037B, 0x037D, BP_SC_GREK, 1}, {0x0386, 0x0386, BP_SC_GREK, 1},
	{0x0388, 0x038A, BP_SC_GREK, 1}, {0x038C, 0x038C, BP_SC_GREK, 1},
	{0x038E, 0x03A1, BP_SC_GREK, 1}, {0x03A3, 0x03CF, BP_SC_GREK, 1},
	{0x0400, 0x045F, BP_SC_CYRL, 1}, {0x048A, 0x04FF, BP_SC_CYRL, 1},
	{0x0510, 0x0529, BP_SC_CYRL, 1}, {0x052E, 0x052F, BP_SC_CYRL, 1},
	{0x0531, 0x0556, BP_SC_ARMN, 1}, {0x0559, 0x0559, BP_SC_ARMN, 1},
	{0x0560, 0x0586, BP_SC_ARMN, 1}, {0x05B0, 0x05C7, BP_SC_HEBR, 0},
	{0x05D0, 0x05EA, BP_SC_HEBR, 1}, {0x05EF, 0x05F2, BP_SC_HEBR, 1},
	{0x0620, 0x063F, BP_SC_ARAB, 1}, {0x0641, 0x064A, BP_SC_ARAB, 1},
	{0x064B, 0x065F, BP_SC_ARAB, 0}, {0x0671, 0x0672, BP_SC_ARAB, 1},
	{0x0674, 0x0674, BP_SC_ARAB, 1}, {0x0679, 0x068D, BP_SC_ARAB, 1},
	{0x068F, 0x06A0, BP_SC_ARAB, 1}, {0x06A2, 0x06D3, BP_SC_ARAB, 1},
	{0x06D5, 0x06D5, BP_SC_ARAB, 1}, {0x06E5, 0x06E6, BP_SC_ARAB, 1},
	{0x06EE, 0x06EF, BP_SC_ARAB, 1}, {0x06FA, 0x06FC, BP_SC_ARAB, 1},
	{0x06FF, 0x06FF, BP_SC_ARAB, 1}, {0x0750, 0x077F, BP_SC_ARAB, 1},
	{0x0780, 0x07A5, BP_SC_THAA, 1}, {0x0870, 0x0887, BP_SC_ARAB, 1},
	{0x0889, 0x088E, BP_SC_ARAB, 1}, {0x08A0, 0x08AC, BP_SC_ARAB, 1},
	{0x08B2, 0x08B2, BP_SC_ARAB, 1}, {0x08B5, 0x08C9, BP_SC_ARAB, 1},
	{0x08CA, 0x08FF, BP_SC_ARAB, 0}, {0x0904, 0x0939, BP_SC_DEVA, 1},
	{0x093D, 0x093D, BP_SC_DEVA, 1}, {0x0950, 0x0950, BP_SC_DEVA, 1},
	{0x0960, 0x0961, BP_SC_DEVA, 1}, {0x0971, 0x0977, BP_SC_DEVA, 1},
	{0x0979, 0x097F, BP_SC_DEVA, 1}, {0x0980, 0x09EF, BP_SC_BENG, 1},
	{0x0A00, 0x0A6F, BP_SC_GURU, 1}, {0x0A80, 0x0AEF, BP_SC_GUJR, 1},
	{0x0B00, 0x0B6F, BP_SC_ORYA, 1}, {0x0B80, 0x0BEF, BP_SC_TAML, 1},
	{0x0C00, 0x0C6F, BP_SC_TELU, 1}, {0x0C80, 0x0CF3, BP_SC_KNDA, 1},
	{0x0D00, 0x0D6F, BP_SC_MLYM, 1}, {0x0D80, 0x0DEF, BP_SC_SINH, 1},
	{0x0E01, 0x0E30, BP_SC_THAI, 1}, {0x0E32, 0x0E32, BP_SC_THAI, 1},
	{0x0E40, 0x0E46, BP_SC_THAI, 1}, {0x0E81, 0x0EB0, BP_SC_LAOO, 1},
	{0x0EB2, 0x0EB2, BP_SC_LAOO, 1}, {0x0EBD, 0x0EC4, BP_SC_LAOO, 1},
	{0x0EC6, 0x0EC6, BP_SC_LAOO, 1}, {0x0EDE, 0x0EDF, BP_SC_LAOO, 1},
	{0x0F00, 0x0F00, BP_SC_TIBT, 1}, {0x0F40, 0x0F6C, BP_SC_TIBT, 1},
	{0x1000, 0x102A, BP_SC_MYMR, 1}, {0x103F, 0x103F, BP_SC_MYMR, 1},
	{0x1050, 0x1055, BP_SC_MYMR, 1}, {0x10C7, 0x10C7, BP_SC_GEOR, 1},
	{0x10CD, 0x10CD, BP_SC_GEOR, 1}, {0x10D0, 0x10F0, BP_SC_GEOR, 1},
	{0x10F7, 0x10FA, BP_SC_GEOR, 1}, {0x10FD, 0x10FF, BP_SC_GEOR, 1},
	{0x1200, 0x135A, BP_SC_ETHI, 1}, {0x1380, 0x138F, BP_SC_ETHI, 1},
	{0x1780, 0x17A2, BP_SC_KHMR, 1}, {0x17A5, 0x17A7, BP_SC_KHMR, 1},
	{0x17A9, 0x17B3, BP_SC_KHMR, 1}, {0x17D7, 0x17D7, BP_SC_KHMR, 1},
	{0x17DC, 0x17DC, BP_SC_KHMR, 1}, {0x1C90, 0x1CBA, BP_SC_GEOR, 1},
	{0x1CBD, 0x1CBF, BP_SC_GEOR, 1}, {0x1E00, 0x1E99, BP_SC_LATN, 1},
	{0x1E9E, 0x1E9E, BP_SC_LATN, 1}, {0x1EA0, 0x1EF9, BP_SC_LATN, 1},
	{0x1F00, 0x1F15, BP_SC_GREK, 1}, {0x1F18, 0x1F1D, BP_SC_GREK, 1},
	{0x1F20, 0x1F45, BP_SC_GREK, 1}, {0x1F48, 0x1F4D, BP_SC_GREK, 1},
	{0x1F50, 0x1F57, BP_SC_GREK, 1}, {0x1F59, 0x1F59, BP_SC_GREK, 1},
	{0x1F5B, 0x1F5B, BP_SC_GREK, 1}, {0x1F5D, 0x1F5D, BP_SC_GREK, 1},
	{0x1F5F, 0x1F70, BP_SC_GREK, 1}, {0x1F72, 0x1F72, BP_SC_GREK, 1},
	{0x1F74, 0x1F74, BP_SC_GREK, 1}, {0x1F76, 0x1F76, BP_SC_GREK, 1},
	{0x1F78, 0x1F78, BP_SC_GREK, 1}, {0x1F7A, 0x1F7A, BP_SC_GREK, 1},
	{0x1F7C, 0x1F7C, BP_SC_GREK, 1}, {0x1F80, 0x1FB4, BP_SC_GREK, 1},
	{0x1FB6, 0x1FBA, BP_SC_GREK, 1}, {0x1FBC, 0x1FBC, BP_SC_GREK, 1},
	{0x1FC2, 0x1FC4, BP_SC_GREK, 1}, {0x1FC6, 0x1FC8, BP_SC_GREK, 1},
	{0x1FCA, 0x1FCA, BP_SC_GREK, 1}, {0x1FCC, 0x1FCC, BP_SC_GREK, 1},
	{0x1FD0, 0x1FD2, BP_SC_GREK, 1}, {0x1FD6, 0x1FDA, BP_SC_GREK, 1},
	{0x1FE0, 0x1FE2, BP_SC_GREK, 1}, {0x1FE4, 0x1FEA, BP_SC_GREK, 1},
	{0x1FEC, 0x1FEC, BP_SC_GREK, 1}, {0x1FF2, 0x1FF4, BP_SC_GREK, 1},
	{0x1FF6, 0x1FF8, BP_SC_GREK, 1}, {0x1FFA, 0x1FFA, BP_SC_GREK, 1},
	{0x1FFC, 0x1FFC, BP_SC_GREK, 1}, {0x2D27, 0x2D27, BP_SC_GEOR, 1},
	{0x2D2D, 0x2D2D, BP_SC_GEOR, 1}, {0x2D80, 0x2D96, BP_SC_ETHI, 1},
	{0x2DA0, 0x2DA6, BP_SC_ETHI, 1}, {0x2DA8, 0x2DAE, BP_SC_ETHI, 1},
	{0x2DB0, 0x2DB6, BP_SC_ETHI, 1}, {0x2DB8, 0x2DBE, BP_SC_ETHI, 1},
	{0x2DC0, 0x2DC6, BP_SC_ETHI, 1}, {0x2DC8, 0x2DCE, BP_SC_ETHI, 1},
	{0x2DD0, 0x2DD6, BP_SC_ETHI, 1}, {0x2DD8, 0x2DDE, BP_SC_ETHI, 1},
	{0x3005, 0x3007, BP_SC_HAN, 1}, {0x3041, 0x3096, BP_SC_JPAN, 1},
	{0x3099, 0x309A, BP_SC_JPAN, 0}, {0x309D, 0x309E, BP_SC_JPAN, 1},
	{0x30A1, 0x30FA, BP_SC_JPAN, 1}, {0x30FC, 0x30FE, BP_SC_JPAN, 1},
	{0x3105, 0x312D, BP_SC_HANB, 1}, {0x312F, 0x312F, BP_SC_HANB, 1},
	{0x31A0, 0x31BF, BP_SC_HANB, 1}, {0x3400, 0x4DBF, BP_SC_HAN, 1},
	{0x4E00, 0x9FFF, BP_SC_HAN, 1}, {0xA67F, 0xA67F, BP_SC_CYRL, 1},
	{0xA717, 0xA71F, BP_SC_LATN, 1}, {0xA788, 0xA788, BP_SC_LATN, 1},
	{0xA78D, 0xA78D, BP_SC_LATN, 1}, {0xA792, 0xA793, BP_SC_LATN, 1},
	{0xA7AA, 0xA7AA, BP_SC_LATN, 1}, {0xA7AE, 0xA7AE, BP_SC_LATN, 1},
	{0xA7B8, 0xA7B9, BP_SC_LATN, 1}, {0xA7C0, 0xA7CA, BP_SC_LATN, 1},
	{0xA7D0, 0xA7D1, BP_SC_LATN, 1}, {0xA7D3, 0xA7D3, BP_SC_LATN, 1},
	{0xA7D5, 0xA7D9, BP_SC_LATN, 1}, {0xA9E7, 0xA9EF, BP_SC_MYMR, 1},
	{0xA9FA, 0xA9FE, BP_SC_MYMR, 1}, {0xAA60, 0xAA76, BP_SC_MYMR, 1},
	{0xAA7A, 0xAA7A, BP_SC_MYMR, 1}, {0xAA7E, 0xAA7F, BP_SC_MYMR, 1},
	{0xAB01, 0xAB06, BP_SC_ETHI, 1}, {0xAB09, 0xAB0E, BP_SC_ETHI, 1},
	{0xAB11, 0xAB16, BP_SC_ETHI, 1}, {0xAB20, 0xAB26, BP_SC_ETHI, 1},
	{0xAB28, 0xAB2E, BP_SC_ETHI, 1}, {0xAB66, 0xAB67, BP_SC_LATN, 1},
	{0xAC00, 0xD7A3, BP_SC_KORE, 1}, {0xFA0E, 0xFA0F, BP_SC_HAN, 1},
	{0xFA11, 0xFA11, BP_SC_HAN, 1}, {0xFA13, 0xFA14, BP_SC_HAN, 1},
	{0xFA1F, 0xFA1F, BP_SC_HAN, 1}, {0xFA21, 0xFA21, BP_SC_HAN, 1},
	{0xFA23, 0xFA24, BP_SC_HAN, 1}, {0xFA27, 0xFA29, BP_SC_HAN, 1},
	{0x1B11F, 0x1B122, BP_SC_JPAN, 1}, {0x1B150, 0x1B152, BP_SC_JPAN, 1},
	{0x1B164, 0x1B167, BP_SC_JPAN, 1}, {0x1DF00, 0x1DF1E, BP_SC_LATN, 1},
	{0x1E7E0, 0x1E7E6, BP_SC_ETHI, 1}, {0x1E7E8, 0x1E7EB, BP_SC_ETHI, 1},
	{0x1E7ED, 0x1E7EE, BP_SC_ETHI, 1}, {0x1E7F0, 0x1E7FE, BP_SC_ETHI, 1},
	{0x20000, 0x2A6DF, BP_SC_HAN, 1}, {0x2A700, 0x2B738, BP_SC_HAN, 1},
	{0x2B740, 0x2B81D, BP_SC_HAN, 1}, {0x2B820, 0x2CEA1, BP_SC_HAN, 1},
	{0x2CEB0, 0x2EBE0, BP_SC_HAN, 1}, {0x30000, 0x3134F, BP_SC_HAN, 1},
};

/* The script set of c beyond Latin-1 (0: not in a name); *start: whether
 * it may begin one. */
static uint32_t bp_sc_of(uint32_t c, int *start)
{
	size_t lo = 0, hi = sizeof bp_sc_ranges / sizeof bp_sc_ranges[0];

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		const struct bp_sc_range *r = &bp_sc_ranges[mid];
		if (c < r->lo)
			hi = mid;
		else if (c > r->hi)
			lo = mid + 1;
		else {
			*start = r->start;
			return r->set;
		}
	}
	*start = 0;
	return 0;
}

/* Whether c beyond Latin-1 is a capital of the Latin, Greek, Cyrillic,
 * Armenian or Georgian blocks (a name starting with one is no function
 * name for Elixir: Mod."Привет"/1).  Greek Extended is not covered. */
static int bp_sc_upper(uint32_t c)
{
	int even = c % 2 == 0;

	if ((c >= 0x100 && c <= 0x137) || (c >= 0x14A && c <= 0x177) ||
	    (c >= 0x1E00 && c <= 0x1E95) || (c >= 0x1EA0 && c <= 0x1EFF) ||
	    (c >= 0x460 && c <= 0x481) || (c >= 0x48A && c <= 0x4BF) ||
	    (c >= 0x4D0 && c <= 0x52F) || (c >= 0x3D8 && c <= 0x3EF))
		return even;
	if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E) ||
	    (c >= 0x4C1 && c <= 0x4CE))
		return !even;
	return c == 0x178 || c == 0x1E9E || c == 0x4C0 || c == 0x37F ||
	       c == 0x386 || (c >= 0x388 && c <= 0x38F && c != 0x38B &&
			      c != 0x38D) ||
	       (c >= 0x391 && c <= 0x3AB && c != 0x3A2) || c == 0x3CF ||
	       (c >= 0x400 && c <= 0x42F) || (c >= 0x531 && c <= 0x556) ||
	       (c >= 0x10A0 && c <= 0x10C5) || (c >= 0x1C90 && c <= 0x1CBF);
}

#endif
