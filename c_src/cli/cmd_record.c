/* cmd_record.c -- placeholder, replaced below. */
#include "bp_cli.h"
int bp_cmd_record(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	return bp_cli_usage("record", "not built yet");
}
