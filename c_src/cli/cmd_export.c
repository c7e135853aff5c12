/* cmd_export.c -- `beamprobe export --format F [-o FILE] DIR`: parses the
 * options and hands the trace to one exporter (bp_export.h).
 */
#include "bp_cli.h"
#include "bp_export.h"

#include <getopt.h>
#include <string.h>

static const struct {
	const char *name;
	int (*run)(struct bp_reader *r, struct bp_out *o);
} formats[] = {
	{"perfetto", bp_export_perfetto},
	{"chrome", bp_export_perfetto}, /* the same JSON, by its other name */
	{"speedscope", bp_export_speedscope},
	{"folded", bp_export_folded},
	{"callgrind", bp_export_callgrind},
};

int bp_cmd_export(int argc, char **argv)
{
	static const struct option opts[] = {
		{"format", required_argument, 0, 'F'},
		{"output", required_argument, 0, 'o'},
		{"help", no_argument, 0, 'h'},
		{0, 0, 0, 0}};
	const char *format = NULL, *output = NULL;
	struct bp_reader r;
	struct bp_out o;
	size_t k = 0;
	int c, err, rc = BP_EXIT_OK;

	optind = 1;
	while ((c = getopt_long(argc, argv, "F:o:h", opts, NULL)) != -1) {
		switch (c) {
		case 'F':
			format = optarg;
			break;
		case 'o':
			output = optarg;
			break;
		case 'h':
			return bp_cli_help("export");
		default:
			return bp_cli_usage("export", "bad option");
		}
	}
	if (!format)
		return bp_cli_usage("export", "--format is required "
				    "(perfetto, speedscope, folded, callgrind)");
	while (k < sizeof formats / sizeof *formats &&
	       strcmp(formats[k].name, format) != 0)
		k++;
	if (k == sizeof formats / sizeof *formats)
		return bp_cli_usage("export", "unknown format '%s' (perfetto, "
				    "speedscope, folded, callgrind)", format);
	if (optind != argc - 1)
		return bp_cli_usage("export", "expected one trace directory");
	if (bp_cli_open(&r, argv[optind], 0) != 0)
		return BP_EXIT_DAMAGED;
	/* A time profile of calls whose times are unknown would be false
	 * (perfetto shows them as instants instead). */
	if (formats[k].run != bp_export_perfetto && bp_meta_no_returns(&r.meta)) {
		bp_cli_error("%s has no return events (recorded without return; "
			     "exceptions alone records no return): its call times are unknown, so "
			     "a %s profile of it would be false; record with "
			     "return => true (or '-> return' in the pattern), "
			     "or export --format perfetto (calls as instants)",
			     argv[optind], format);
		bp_reader_close(&r);
		return BP_EXIT_USAGE;
	}
	/* In a trace where some functions were traced without returns,
	 * their calls have no time: a profile leaves them out, and says so
	 * (perfetto shows them as instants). */
	if (formats[k].run != bp_export_perfetto &&
	    bp_meta_env(&r.meta, "untimed_calls"))
		bp_cli_error("note: calls traced without return events have "
			     "no time and are not in the %s profile: %s",
			     format, bp_meta_env(&r.meta, "untimed_calls"));
	if ((err = bp_out_open(&o, output)) != 0) {
		bp_cli_error("%s: %s", output ? output : "standard output",
			     strerror(err));
		bp_reader_close(&r);
		return BP_EXIT_DAMAGED; /* as a write that fails later */
	}
	if (formats[k].run(&r, &o) != 0)
		rc = BP_EXIT_DAMAGED;
	err = bp_out_close(&o);
	rc = bp_cli_finish(&r, err, output ? output : "standard output", rc);
	bp_reader_close(&r);
	return rc;
}
