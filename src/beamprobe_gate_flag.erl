%%% @doc The annotation gate's flag (see {@link beamprobe_gate}): what
%%% beamprobe:annotate/1,2 runs.
%%%
%%% This is the version on disk: `on', always ask the NIF (which then
%%% decides, correctly, at the cost of a NIF call).  While the application
%%% runs, beamprobe_gate replaces this module with a version compiled from
%%% a constant: `annotate(_, _) -> ok' and `on() -> false' while no
%%% session runs and no tool is attached to the `beamprobe:annotate'
%%% probe, so that an idle annotation costs one more remote call (a jump:
%%% beamprobe:annotate/2 tail-calls annotate/2 here) and no NIF call.
-module(beamprobe_gate_flag).

-export([on/0, annotate/2]).

%% @doc Does beamprobe:annotate/1,2 call the NIF?
-spec on() -> boolean().
on() -> true.

%% @doc beamprobe:annotate/2 once it passed the gate.
-spec annotate(term(), term()) -> ok.
annotate(Tag, Term) -> beamprobe:annotate_nif(Tag, Term).
