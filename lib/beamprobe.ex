defmodule Beamprobe do
  @moduledoc """
  Production-safe tracing for the BEAM, from Elixir.

  A thin Elixir face on the Erlang API (`:beamprobe`): keyword options,
  `{:error, reason}` for every bad input, events printed in Elixir syntax,
  and `match/1`, which turns an `fn` into a match specification at compile
  time. The tracer itself is C (a NIF): each event is written by the
  traced process into a bounded per-thread buffer, never as a message, so
  a trace cannot flood a mailbox or the node.

      iex> Beamprobe.calls("Enum.sum/1", 2)
      1
      12:00:01.123456 #PID<0.110.0>(:erlang.apply/2) call Enum.sum([1, 2, 3])

  Safe by default: at most `limit` events are printed, a trace ends after
  15 seconds, return values are traced only where asked (`:: return` in a
  pattern string, `:return` in a `match/1` body, or `return: true`), and
  terms are captured with bounded depth and size (`[1, 2, ...]`,
  `"abc" <> ...`). `clear/0` stops every trace started from a shell.

  A guide from `mix.exs` to a first trace: `docs/elixir.md`.
  """

  @typedoc """
  What to trace:

    * a string, in Elixir syntax (`"Shop.buy(:apple, n) when n > 1 :: return"`,
      `"Shop.buy/2"`, `"Shop.buy(%Shop.Order{status: :paid})"`) or Erlang's
      (`"shop:buy/2"`);
    * `{module, function, arity}` (`:_` for any), `{module, function,
      match_spec}` (see `match/1`), `{module, function, :return_trace}`;
    * a list of these.
  """
  @type pattern :: String.t() | {module() | :_, atom(), term()} | [pattern()]

  @typedoc "`n` events in all, or at most `n` events per `ms` milliseconds."
  @type limit :: pos_integer() | {pos_integer(), pos_integer()}

  @typedoc "A running (or just stopped) session of `start/1`."
  @type session :: pid()

  @typedoc "Options as a keyword list (or a map); see `calls/3`."
  @type options :: keyword() | map()

  @doc """
  Traces calls matching `pattern` in every process and prints them in
  Elixir syntax, one line each; returns how many functions the pattern
  matched, or `{:error, reason}` (a sentence: `format_error/1`).

      iex> Beamprobe.calls("String.upcase(s) :: return", 2)
      1
      iex> String.upcase("héllo")
      "HÉLLO"
      12:00:01.123456 #PID<0.110.0>(:erlang.apply/2) call String.upcase("héllo")
      12:00:01.123470 #PID<0.110.0>(:erlang.apply/2) returned from String.upcase/1 -> "HÉLLO"

      iex> require Beamprobe
      iex> Beamprobe.calls({Shop, :buy, Beamprobe.match(fn [item, n] when n > 1 -> :return end)}, 10)
      1

      iex> Beamprobe.calls("Shop.buy(%Shop.Order{status: s}) when s in [:paid, :sent]", {10, 1000},
      ...>   procs: [Process.whereis(Shop.Server)], time: 5_000)
      1

  `limit`: stop after `n` events, or `{n, ms}`: at most `n` events per
  `ms` milliseconds (the surplus is dropped where it happens and reported;
  `on_rate: :stop` ends the trace instead).

  Options (a keyword list or a map; recon_trace's and rexbug's names are
  accepted with their meaning, or refused naming the beamprobe way):

    * `:procs` - `:all` (default), `:new`, `:existing`, a pid, a registered
      name, or a list of these.
    * `:time` - milliseconds before the trace ends (default 15000).
    * `:return` - trace return values and exceptions of every pattern.
    * `:args` - capture depth (default 4), or `:arity` to print `M.f/2`.
    * `:timestamp` - `:time` (default), `:ns` or `:none`.
    * `:io_server` - where to print (default: the caller's group leader).
    * `:print_re` - print only the lines matching a regular expression.
    * `:syntax` - `:elixir` (the default from this module) or `:erlang`.
    * `:on_rate`, `:output` (more sinks, e.g. `[{:file, "/tmp/t"}]`),
      `:force`, `:buffer`, `:return_to`.

  The trace belongs to the shell (its group leader): an exception in iex
  leaves it running, closing the shell or `clear/0` ends it. Calling
  `calls/3` again on a function this shell traces replaces that trace.
  """
  @spec calls(pattern(), limit() | options(), options()) ::
          non_neg_integer() | {:error, term()}
  def calls(pattern, limit, opts \\ []) do
    with {:ok, pattern} <- pattern(pattern),
         {:ok, limit, opts} <- limit_opts(limit, opts) do
      result(apply(:beamprobe, :calls, [pattern | limit] ++ [opts]))
    end
  end

  @doc """
  Traces messages sent or received matching `pattern` (`":send"`,
  `":receive"`, `":send({:ping, _})"`, `":receive(%Shop.Order{})"`, ...)
  and prints them; limits and options as in `calls/3`. Returns the
  number of patterns installed.

      iex> Beamprobe.messages(":send({:ping, _})", 5)
      1
      12:00:01.123456 #PID<0.110.0>(:erlang.apply/2) sent {:ping, 1} to #PID<0.115.0>
  """
  @spec messages(String.t() | [String.t()], limit() | options(), options()) ::
          non_neg_integer() | {:error, term()}
  def messages(pattern, limit, opts \\ []) do
    with {:ok, limit, opts} <- limit_opts(limit, opts) do
      result(apply(:beamprobe, :messages, [pattern | limit] ++ [opts]))
    end
  end

  @doc """
  Stops every trace started by `calls/3` or `messages/3` (from any shell).

      iex> Beamprobe.clear()
      :ok
  """
  @spec clear() :: :ok
  def clear, do: :beamprobe.clear()

  @doc """
  Starts a tracing session owned by the calling process, written to
  files (read them with `bin/beamprobe print --syntax elixir DIR`), to a
  handler module (`Beamprobe.Handler`) or to this shell.

      iex> {:ok, s} = Beamprobe.start(calls: [{Shop, :buy, 2}], return: true,
      ...>                            output: {:file, "/tmp/shop"})
      iex> Beamprobe.stop(s)
      {:ok, %{events: 2, bytes: 1020, dropped: %{total: 0}, output: '/tmp/shop', ...}}

  Every key is optional; nested options are keyword lists too:

    * `:calls` - `[{module, function, arity}]` or `[{{m, f, a}, match_spec}]`.
    * `:messages` - `[{:send, true}, {:receive, true}]`.
    * `:procs` - `:all` (default), `:new`, `:existing` or a list of pids/names.
    * `:exclude` - pids/names this session does not record (others may).
    * `:return`, `:exceptions`, `:return_to` - booleans (default false).
    * `:events` - `[:procs, :running, :gc, :ports, ...]`.
    * `:output` - `{:file, dir}`, `{:handler, module, arg}`, `:lttng`,
      `:usdt`, `{:tcp, "127.0.0.1:port"}` or `{:tcp, {host, port}, queue: n,
      token: "t"}`, `:shell` (print here in Elixir syntax), or a list.
    * `:capture` - `[depth: 4, list: 16, binary: 64, bytes: 512]`.
    * `:limits` - `[events: n, bytes: n, seconds: 60, rate: {n, ms}]`.
    * `:buffer`, `:overflow`, `:on_rate`, `:meta`, `:tag`, `:force`,
      `:on_tamper`, `:monitor`, `:sample` - as in `:beamprobe.start/1`.

  Returns `{:error, reason}` for any bad input, and nothing stays
  installed then.
  """
  @spec start(options()) :: {:ok, session()} | {:error, term()}
  def start(spec) do
    with {:ok, spec} <- to_map(spec, :spec),
         {:ok, spec} <- nested(spec) do
      :beamprobe.start(spec)
    end
  end

  @doc """
  Stops a session: removes its trace flags and patterns, writes what is
  buffered, and returns its summary (`{:error, :not_found}` for anything
  that is not a session).

      iex> Beamprobe.stop(self())
      {:error, :not_found}
  """
  @spec stop(session()) :: {:ok, map()} | {:error, :not_found}
  def stop(session), do: :beamprobe.stop(session)

  @doc """
  Counters and configuration of a running session.

      iex> Beamprobe.info(self())
      {:error, :not_found}
  """
  @spec info(session()) :: {:ok, map()} | {:error, term()}
  def info(session), do: :beamprobe.info(session)

  @doc """
  Writes `term` as an `annotation` event into every session tracing the
  calling process (and fires the USDT probe `beamprobe:annotate`). Never
  fails.

      iex> Beamprobe.annotate({:checkout, 42})
      :ok
  """
  @spec annotate(term()) :: :ok
  def annotate(term), do: :beamprobe.annotate(term)

  @doc """
  A readable sentence for an error reason returned by this module.

      iex> Beamprobe.format_error({:unknown_option, :bogus}) |> is_binary()
      true
  """
  @spec format_error(term()) :: String.t()
  def format_error(reason), do: reason |> :beamprobe.format_error() |> to_string()

  @doc """
  Compiles an `fn` into a trace match specification at compile time, in
  the spirit of ex2ms: the head is the argument list, the guard is
  checked by the VM before anything is captured, and the body says what
  to record.

      iex> require Beamprobe
      iex> Beamprobe.match(fn [a, b] when a > 1 -> :return end)
      [{[:"$1", :"$2"], [{:>, :"$1", 1}], [{:return_trace}]}]

      iex> require Beamprobe
      iex> Beamprobe.match(fn [%{status: :paid}, _] -> true end)
      [{[%{status: :paid}, :_], [], [true]}]

      iex> require Beamprobe
      iex> min = 10
      iex> Beamprobe.match(fn [n] when n >= ^min and n in [11, 12] -> [:return, message(n)] end)
      [{[:"$1"], [{:andalso, {:>=, :"$1", {:const, 10}}, {:orelse, {:"=:=", :"$1", 11}, {:"=:=", :"$1", 12}}}], [{:return_trace}, {:message, :"$1"}]}]

  Heads: variables (`_` and `_name` match anything), literals, tuples,
  lists, maps and structs (`%Shop.Order{status: :paid}`), `^pinned`
  values. Guards: comparisons, `and`/`or`/`not`, arithmetic, `is_*`
  tests, `elem/2`, `hd/1`, `tl/1`, `length/1`, `map_size/1`,
  `byte_size/1`, `binary_part/3`, `is_map_key/2`, `abs/1`,
  `x in [literals]`. Bodies: `true`, `:return`
  (`return_trace()`), `:exception` (`exception_trace()`), `:caller`,
  `message(expr)`, or a list of these. Anything else is a compile error
  naming the construct.
  """
  defmacro match(fun), do: Beamprobe.MatchSpec.compile(fun, __CALLER__)

  # ---- internals --------------------------------------------------------

  # What a pattern is, for an argument that is none.
  @pattern_forms "a pattern is a string (\"Mod.fun/2\", " <>
                   "\"Mod.fun(a, _) :: return\", Erlang's \"m:f/2\"), " <>
                   "a tuple {Mod, :fun, arity} ({Mod, :fun, match_spec}), " <>
                   "or a list of these"

  defp pattern(p) when is_binary(p) or is_tuple(p), do: {:ok, p}
  defp pattern(p) when is_list(p) and p != [], do: {:ok, p}
  defp pattern(p), do: {:error, {:bad_pattern, p, @pattern_forms}}

  # calls(p, opts) in rexbug's style: options second, the count in :msgs.
  defp limit_opts(limit, opts) when is_list(limit) or is_map(limit) do
    if opts in [[], %{}] do
      with {:ok, o} <- to_map(limit, :opts), do: {:ok, [], elixir(o)}
    else
      {:error, {:bad_option, :opts, opts}}
    end
  end

  defp limit_opts(limit, opts) do
    with {:ok, o} <- to_map(opts, :opts), do: {:ok, [limit], elixir(o)}
  end

  # the shell API's extra sinks (output: ...) as start/1's, keyword
  # options and Elixir strings included
  defp elixir(opts) do
    opts = Map.put_new(opts, :syntax, :elixir)

    case opts do
      %{output: out} -> %{opts | output: output(out)}
      _ -> opts
    end
  end

  defp to_map(m, _what) when is_map(m), do: {:ok, m}

  # A key given twice: the first is in force, as Keyword.get/2 and
  # proplists (the Erlang API, rexbug, recon_trace) read it; Map.new/1
  # kept the last (time: 1000, time: 5000 traced for 5 s).
  defp to_map(l, what) when is_list(l) do
    if Keyword.keyword?(l),
      do: {:ok, l |> Enum.reverse() |> Map.new()},
      else: {:error, {:bad_option, what, l}}
  end

  defp to_map(other, what), do: {:error, {:bad_option, what, other}}

  @nested [:capture, :limits, :monitor, :sample]

  defp nested(spec) do
    Enum.reduce_while(spec, {:ok, spec}, fn
      {k, v}, {:ok, acc} when k in @nested and is_list(v) and v != [] ->
        case to_map(v, k) do
          {:ok, m} -> {:cont, {:ok, Map.put(acc, k, m)}}
          err -> {:halt, err}
        end

      {:output, out}, {:ok, acc} ->
        {:cont, {:ok, Map.put(acc, :output, output(out))}}

      _, acc ->
        {:cont, acc}
    end)
  end

  defp output(list) when is_list(list), do: Enum.map(list, &output/1)
  defp output(:shell), do: printer(%{})

  defp output({:file, dir}) when is_binary(dir), do: {:file, String.to_charlist(dir)}

  defp output({:file, dir, o}) when is_binary(dir) and is_list(o),
    do: {:file, String.to_charlist(dir), Map.new(o)}

  defp output({:handler, :beamprobe_printer, arg}) when is_list(arg) or is_map(arg),
    do: printer(Map.new(arg))

  defp output({:handler, mod, arg, o}) when is_list(o), do: {:handler, mod, arg, Map.new(o)}

  # {:tcp, "host:port" | {host, port}} or with options, a keyword list
  defp output({:tcp, addr}), do: output({:tcp, addr, %{}})

  defp output({:tcp, addr, o}) when is_list(o) or is_map(o) do
    if is_map(o) or Keyword.keyword?(o),
      do: {:tcp, tcp_addr(addr), Map.new(o)},
      else: {:tcp, addr, o}
  end
  defp output(other), do: other

  defp tcp_addr({host, port}) when is_binary(host), do: {String.to_charlist(host), port}
  defp tcp_addr(addr), do: addr

  # The shell printer in Elixir syntax, to the caller's group leader.
  defp printer(arg) do
    {:handler, :beamprobe_printer,
     arg |> Map.put_new(:io, Process.group_leader()) |> Map.put_new(:syntax, :elixir)}
  end

  # Erlang's texts (charlists) as Elixir strings.
  defp result({:error, {:bad_pattern, p, col, msg}}) when is_list(msg),
    do: {:error, {:bad_pattern, p, col, List.to_string(msg)}}

  defp result({:error, {:bad_pattern, p, msg}}) when is_list(msg),
    do: {:error, {:bad_pattern, p, List.to_string(msg)}}

  defp result({:error, {:unsupported_option, name, hint}}) when is_list(hint),
    do: {:error, {:unsupported_option, name, List.to_string(hint)}}

  defp result({:error, _} = e), do: e
  defp result(n), do: n
end
