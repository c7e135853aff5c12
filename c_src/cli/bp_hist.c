/* bp_hist.c -- log-linear histogram (see bp_hist.h). */
#include "bp_hist.h"

#include <string.h>

void bp_hist_init(struct bp_hist *h)
{
	memset(h, 0, sizeof *h);
	h->min = UINT64_MAX;
}

static unsigned bucket_of(uint64_t v)
{
	if (v < BP_HIST_SUB)
		return (unsigned)v;
	unsigned e = 63u - (unsigned)__builtin_clzll(v); /* 4..63 */
	unsigned sub = (unsigned)(v >> (e - 4)) & (BP_HIST_SUB - 1);
	return BP_HIST_SUB + (e - 4) * BP_HIST_SUB + sub;
}

/* Smallest value of bucket b and its width. */
static void bucket_range(unsigned b, uint64_t *lo, uint64_t *width)
{
	if (b < BP_HIST_SUB) {
		*lo = b;
		*width = 1;
		return;
	}
	unsigned e = (b - BP_HIST_SUB) / BP_HIST_SUB + 4;
	unsigned sub = (b - BP_HIST_SUB) % BP_HIST_SUB;
	*width = 1ull << (e - 4);
	*lo = (1ull << e) + sub * *width;
}

void bp_hist_add(struct bp_hist *h, uint64_t v)
{
	unsigned b = bucket_of(v);

	if (h->count[b] != UINT32_MAX)
		h->count[b]++;
	h->n++;
	if (v < h->min)
		h->min = v;
	if (v > h->max)
		h->max = v;
}

uint64_t bp_hist_quantile(const struct bp_hist *h, double q)
{
	uint64_t total = 0, rank, seen = 0;

	for (unsigned b = 0; b < BP_HIST_BUCKETS; b++)
		total += h->count[b];
	if (!total)
		return 0;
	rank = (uint64_t)(q * (double)total + 0.999999);
	if (rank < 1)
		rank = 1;
	if (rank > total)
		rank = total;
	for (unsigned b = 0; b < BP_HIST_BUCKETS; b++) {
		seen += h->count[b];
		if (seen >= rank) {
			uint64_t lo, w, v;
			bucket_range(b, &lo, &w);
			v = lo + w / 2;
			if (v < h->min)
				v = h->min;
			if (v > h->max)
				v = h->max;
			return v;
		}
	}
	return h->max;
}
