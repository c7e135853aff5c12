defmodule BeamprobeTest.ApiTest do
  # The Beamprobe module against the real tracer: keyword options, errors
  # as {:error, reason}, Elixir-syntax output, handler modules, match/1,
  # struct/in/<> patterns, and the docs iex shows.
  use ExUnit.Case, async: false
  import ExUnit.CaptureIO
  require Beamprobe

  alias BeamprobeTest.{Collector, Order, Target}

  doctest Beamprobe, only: [match: 1, stop: 1, info: 1, annotate: 1, format_error: 1, clear: 0]
  doctest Beamprobe.Handler

  setup do
    on_exit(fn -> Beamprobe.clear() end)
    {:ok, io} = StringIO.open("")
    %{io: io}
  end

  defp lines(io, n, tries \\ 100) do
    {_, out} = StringIO.contents(io)
    ls = out |> String.split("\n", trim: true) |> Enum.reject(&String.starts_with?(&1, "%"))

    cond do
      length(ls) >= n -> ls
      tries == 0 -> flunk("expected #{n} lines, got: #{inspect(out)}")
      true -> Process.sleep(50) && lines(io, n, tries - 1)
    end
  end

  # What was printed once the trace has ended (clear/0 waits for it).
  defp printed(io) do
    Beamprobe.clear()
    Process.sleep(100)
    {_, out} = StringIO.contents(io)
    out |> String.split("\n", trim: true) |> Enum.reject(&String.starts_with?(&1, "%"))
  end

  test "calls/3 with keyword options prints Elixir syntax", %{io: io} do
    assert 1 ==
             Beamprobe.calls("BeamprobeTest.Target.f/2", 2,
               io_server: io,
               timestamp: :none,
               return: true
             )

    Target.f(:apple, %Order{id: 1, status: :paid})
    [call, ret] = lines(io, 2)

    assert call =~
             ~r/^#PID<\d+\.\d+\.\d+>.* call BeamprobeTest\.Target\.f\(:apple, %BeamprobeTest\.Order\{id: 1, items: nil, status: :paid\}\)$/

    assert ret =~ "returned from BeamprobeTest.Target.f/2 -> {:apple, %BeamprobeTest.Order{"
  end

  test "syntax: :erlang gives the Erlang text back", %{io: io} do
    assert 1 ==
             Beamprobe.calls("BeamprobeTest.Target.g/1", 1,
               io_server: io,
               timestamp: :none,
               syntax: :erlang
             )

    Target.g("héllo")
    [line] = lines(io, 1)
    assert line =~ "call 'Elixir.BeamprobeTest.Target':g(<<\""
  end

  test "a second calls/3 on the same function replaces the trace, named in Elixir", %{io: io} do
    assert 1 == Beamprobe.calls("BeamprobeTest.Target.g/1", 5, io_server: io)
    assert 1 == Beamprobe.calls("BeamprobeTest.Target.g/1", 5, io_server: io)
    {_, out} = StringIO.contents(io)
    assert out =~ "% beamprobe: replaced the shell trace on BeamprobeTest.Target.g/1"
  end

  test "options as the second argument (rexbug style) and a map", %{io: io} do
    assert 1 ==
             Beamprobe.calls("BeamprobeTest.Target.g/1", msgs: 1, io_server: io, timestamp: :none)

    Target.g(1)
    assert [_] = lines(io, 1)
    assert 1 == Beamprobe.calls("BeamprobeTest.Target.g/1", 1, %{io_server: io})
  end

  test "bad input is {:error, reason}, with a sentence" do
    assert {:error, {:bad_option, :opts, [:bogus]}} = Beamprobe.calls("Enum.sum/1", 1, [:bogus])
    assert {:error, {:bad_option, :opts, _}} = Beamprobe.calls("Enum.sum/1", [:bogus])
    assert {:error, {:bad_option, :opts, 42}} = Beamprobe.calls("Enum.sum/1", 1, 42)
    assert {:error, reason} = Beamprobe.calls("Enum.sum/1", 1, bogus: 1)
    assert is_binary(Beamprobe.format_error(reason))
    assert {:error, {:bad_pattern, "Shop.buy(", _, msg}} = Beamprobe.calls("Shop.buy(", 1)
    assert msg =~ "unbalanced"
    assert {:error, {:bad_pattern, 42, hint}} = Beamprobe.calls(42, 1)
    assert hint =~ "a pattern is a string"
    assert Beamprobe.format_error({:bad_pattern, 42, hint}) =~ "Mod.fun/2"
    # a term that is no pattern, passed on to :beamprobe in a list
    assert {:error, {:bad_pattern, :foo, msg}} = Beamprobe.calls([:foo], 1)
    assert msg =~ "a pattern is a string"
    assert {:error, {:bad_option, :calls, 42} = e} = Beamprobe.start(calls: [42])
    assert Beamprobe.format_error(e) =~ "{M, F, A}"
    assert {:error, {:bad_option, :spec, :nope}} = Beamprobe.start(:nope)
    assert {:error, {:bad_option, :spec, [1, 2]}} = Beamprobe.start([1, 2])
    assert {:error, _} = Beamprobe.start(calls: [{Target, :f, 2}], capture: [depth: 0])
    assert {:error, _} = Beamprobe.start(calls: [{No.Such.Module, :f, 2}])
    assert {:error, :not_found} = Beamprobe.stop(self())
    assert {:error, :not_found} = Beamprobe.info(:not_a_pid)
    assert [] == :beamprobe.list()
  end

  test "a keyword option given twice: the first is in force, as in the Erlang API", %{io: io} do
    assert 1 ==
             Beamprobe.calls("BeamprobeTest.Target.g/1", 5,
               io_server: io,
               time: 100_000,
               time: 900_000
             )

    assert 1 ==
             :beamprobe.calls({BeamprobeTest.Target, :f, 2}, 5,
               io_server: io,
               time: 200_000,
               time: 900_000
             )

    times =
      for s <- :beamprobe.list(), {:ok, i} = :beamprobe.info(s), do: i.config.limits.seconds

    assert Enum.sort(times) == [100.0, 200.0]
  end

  test "an fn typed in iex with an action as an atom is refused, naming match/1" do
    # as iex evaluates it (an :erl_eval fun): its body :return does nothing
    # in a match spec; the same fn in Beamprobe.match/1 traces returns
    {f, _} = Code.eval_string("fn [_x] -> :return end")
    assert {:error, {:bad_pattern, _, msg}} = Beamprobe.calls({Target, :g, f}, 1)
    assert msg =~ "Beamprobe.match(fn ... -> :return end)"
    assert [] == :beamprobe.list()
    assert 1 == Beamprobe.calls({Target, :g, Beamprobe.match(fn [_x] -> :return end)}, 1)
  end

  test "start/1 with nested keyword options and an Elixir handler module" do
    {:ok, s} =
      Beamprobe.start(
        calls: [{Target, :f, 2}],
        return: true,
        procs: [self()],
        capture: [depth: 2, list: 3],
        limits: [events: 10, seconds: 30],
        output: {:handler, Collector, self()}
      )

    assert {:ok, %{config: %{capture: %{depth: 2, list: 3}}}} = Beamprobe.info(s)
    Target.f([1, 2, 3, 4, 5], {:a, {:b, {:c}}})
    assert {:ok, %{events: 2}} = Beamprobe.stop(s)
    events = collect([])
    call = Enum.find(events, &(&1.event == :call))
    assert call.mfa == "'Elixir.BeamprobeTest.Target':f/2"
    ex = Beamprobe.Handler.elixir(call)
    assert ex.mfa == "BeamprobeTest.Target.f/2"
    assert ex.args == "([1, 2, 3, ...], {:a, {:b, {...}}})"
  end

  test "output: :shell prints here in Elixir syntax", %{io: io} do
    {:ok, s} =
      Beamprobe.start(
        calls: [{Target, :g, 1}],
        procs: [self()],
        output: {:handler, :beamprobe_printer, io: io, timestamp: :none}
      )

    Target.g(%{"k" => :v})
    {:ok, _} = Beamprobe.stop(s)
    {_, out} = StringIO.contents(io)
    assert out =~ ~s|call BeamprobeTest.Target.g(%{"k" => :v})|
  end

  test "output: :shell prints to the caller's group leader", %{io: io} do
    gl = Process.group_leader()
    Process.group_leader(self(), io)

    {:ok, s} =
      try do
        Beamprobe.start(calls: [{Target, :g, 1}], procs: [self()], output: :shell)
      after
        Process.group_leader(self(), gl)
      end

    Target.g(a: 1)
    {:ok, _} = Beamprobe.stop(s)
    {_, out} = StringIO.contents(io)
    assert out =~ ~r/#PID<[0-9.]+> call BeamprobeTest\.Target\.g\(\[a: 1\]\)/
  end

  test "messages/3 with keyword options", %{io: io} do
    assert 1 ==
             Beamprobe.messages(":send({:bp_ping, _})", 1,
               io_server: io,
               timestamp: :none,
               procs: [self()]
             )

    send(self(), {:bp_ping, "héllo"})
    [line] = lines(io, 1)
    assert line =~ ~s|sent {:bp_ping, "héllo"} to #PID<|
  end

  test "annotate/1 writes an annotation event" do
    {:ok, s} =
      Beamprobe.start(procs: [self()], events: [:procs], output: {:handler, Collector, self()})

    assert :ok == Beamprobe.annotate({:checkout, "héllo"})
    {:ok, _} = Beamprobe.stop(s)
    events = collect([])
    ann = Enum.find(events, &(&1.event == :annotation))
    assert ann, "no annotation in #{inspect(events)}"
    assert Beamprobe.Handler.elixir(ann).value == ~s|{:checkout, "héllo"}|
  end

  test "match/1 specs trace what they say", %{io: io} do
    min = 2
    ms = Beamprobe.match(fn [a, _] when a >= ^min -> :return end)
    assert 1 == Beamprobe.calls({Target, :f, ms}, 10, io_server: io, timestamp: :none)
    Target.f(1, :no)
    Target.f(2, :yes)
    Target.f(3, "x" <> "y")
    ls = printed(io)
    assert Enum.count(ls, &(&1 =~ " call ")) == 2
    assert Enum.any?(ls, &(&1 =~ "call BeamprobeTest.Target.f(2, :yes)"))
    assert Enum.any?(ls, &(&1 =~ ~s|returned from BeamprobeTest.Target.f/2 -> {3, "xy"}|))
    refute Enum.any?(ls, &(&1 =~ ":no"))
  end

  test "match/1: a pinned value in the head is matched exactly, never as a wildcard" do
    run = fn ms, args -> elem(:erlang.match_spec_test(args, ms, :trace), 1) end
    # :_ and :"$1" inside a pinned value were put in the head as they
    # are: a wildcard and a variable, matching anything
    any = :_
    ms = Beamprobe.match(fn [^any] -> true end)
    assert run.(ms, [:_]) == true
    assert run.(ms, [:other]) == false
    t = {:"$1", :x}
    ms = Beamprobe.match(fn [^t, y] when y > 1 -> true end)
    assert run.(ms, [{:"$1", :x}, 2]) == true
    assert run.(ms, [{:q, :x}, 2]) == false
    assert run.(ms, [{:"$1", :x}, 0]) == false
    # ^pin is an exact match: a larger map does not match
    m = %{a: 1}
    ms = Beamprobe.match(fn [^m] -> true end)
    assert run.(ms, [%{a: 1}]) == true
    assert run.(ms, [%{a: 1, b: 2}]) == false
    s = "a\nb"
    ms = Beamprobe.match(fn [^s, ^s] -> true end)
    assert run.(ms, ["a\nb", "a\nb"]) == true
    assert run.(ms, ["a\nb", "c"]) == false
  end

  test "match/1: in with a negative range bound" do
    run = fn ms, x -> elem(:erlang.match_spec_test([x], ms, :trace), 1) end
    ms = Beamprobe.match(fn [x] when x in -5..5 -> true end)
    assert Enum.map([-6, -5, 0, 5, 6, :a], &run.(ms, &1)) == [false, true, true, true, false, false]
    ms = Beamprobe.match(fn [x] when x in -9..-3 -> true end)
    assert Enum.map([-10, -9, -3, -2], &run.(ms, &1)) == [false, true, true, false]
  end

  defmodule DecreasingRange do
    # the oracle: Elixir's own guard on the same ranges
    def in51(x) when x in 5..1, do: true
    def in51(_), do: false
    def in_neg(x) when x in -1..-5, do: true
    def in_neg(_), do: false
  end

  test "decreasing ranges (5..1) hold as in an Elixir guard: match/1 and strings" do
    run = fn ms, x -> elem(:erlang.match_spec_test([x], ms, :trace), 1) end
    xs = [-6, -5, -3, -1, 0, 1, 3, 5, 6, :a]
    want51 = Enum.map(xs, &DecreasingRange.in51/1)
    want_neg = Enum.map(xs, &DecreasingRange.in_neg/1)
    assert Enum.map(xs, &run.(Beamprobe.match(fn [x] when x in 5..1 -> true end), &1)) == want51
    assert Enum.map(xs, &run.(Beamprobe.match(fn [x] when x in -1..-5 -> true end), &1)) == want_neg
    {:ok, %{match_spec: ms51}} = :beamprobe_pattern.parse("Shop.buy(x) when x in 5..1")
    {:ok, %{match_spec: msneg}} = :beamprobe_pattern.parse("Shop.buy(x) when x in -1..-5")
    assert Enum.map(xs, &run.(ms51, &1)) == want51
    assert Enum.map(xs, &run.(msneg, &1)) == want_neg
  end

  test "match/1 against the VM: structs, in, prefixes, messages" do
    ms =
      Beamprobe.match(fn [%Order{status: s}, "ab" <> _] when s in [:paid, :sent] -> message(s) end)

    ok = fn args -> :erlang.match_spec_test(args, ms, :trace) end
    assert {:ok, :paid, [], []} = ok.([%Order{status: :paid}, "abc"])
    assert {:ok, false, [], []} = ok.([%Order{status: :new}, "abc"])
    assert {:ok, false, [], []} = ok.([%Order{status: :paid}, "xbc"])
    assert {:ok, false, [], []} = ok.([%{status: :paid}, "abc"])
    allowed = [1, 2]
    ms2 = Beamprobe.match(fn [x] when x in ^allowed -> true end)
    assert {:ok, true, [], []} = :erlang.match_spec_test([2], ms2, :trace)
    assert {:ok, false, [], []} = :erlang.match_spec_test([3], ms2, :trace)

    ms3 =
      Beamprobe.match(fn a, {b, c} when elem(c, 0) == :k and not is_nil(b) ->
        [:return, message({a, b})]
      end)

    assert {:ok, {1, 2}, [:return_trace], []} =
             :erlang.match_spec_test([1, {2, {:k}}], ms3, :trace)
  end

  test "match/1: module aliases (also the caller's alias) and negative numbers" do
    alias BeamprobeTest.Order, as: O
    ms = Beamprobe.match(fn [BeamprobeTest.Target, -1, %O{}] -> true end)
    assert [{[BeamprobeTest.Target, -1, %{__struct__: BeamprobeTest.Order}], [], [true]}] = ms
    ms2 = Beamprobe.match(fn [m] when m == O -> true end)
    assert {:ok, true, [], []} = :erlang.match_spec_test([BeamprobeTest.Order], ms2, :trace)
    assert {:ok, false, [], []} = :erlang.match_spec_test([O.Other], ms2, :trace)
    ms3 = Beamprobe.match(fn [m] when m in [O, :b, -2] -> true end)
    assert {:ok, true, [], []} = :erlang.match_spec_test([BeamprobeTest.Order], ms3, :trace)
    assert {:ok, true, [], []} = :erlang.match_spec_test([-2], ms3, :trace)
    assert {:ok, false, [], []} = :erlang.match_spec_test([2], ms3, :trace)
  end

  test "format_error/1 says a 3-element bad_pattern in words" do
    {:error, e} = Beamprobe.calls(":send", 10)
    text = Beamprobe.format_error(e)
    assert text =~ "bad pattern"
    refute String.starts_with?(text, "{")
  end

  test "an annotation without a tag prints no tag (the printer, Elixir syntax)", %{io: io} do
    {:ok, s} =
      Beamprobe.start(
        procs: [self()],
        events: [:procs],
        output: {:handler, :beamprobe_printer, io: io, timestamp: :none}
      )

    :ok = Beamprobe.annotate({:checkout, 42})
    {:ok, _} = Beamprobe.stop(s)
    {_, out} = StringIO.contents(io)
    assert out =~ "annotation {:checkout, 42}"
    refute out =~ ":undefined"
  end

  test "naming a module's functions makes no traced call of it", %{io: io} do
    assert Beamprobe.calls("BeamprobeTest.Target", 10, io_server: io, timestamp: :none) > 1
    assert 1 == Beamprobe.calls("BeamprobeTest.Target.g/1", 10, io_server: io, timestamp: :none)
    Target.g(1)
    [_ | _] = lines(io, 1)
    Beamprobe.clear()
    {_, out} = StringIO.contents(io)
    refute out =~ "module_info"
  end

  test "match/1: is_map_key/2 in Elixir's argument order (map, key)" do
    ms = Beamprobe.match(fn [m] when is_map_key(m, :id) -> true end)
    assert {:ok, true, [], []} = :erlang.match_spec_test([%{id: 1}], ms, :trace)
    assert {:ok, false, [], []} = :erlang.match_spec_test([%{other: 1}], ms, :trace)
  end

  test "match/1 refuses what a match spec cannot express, at compile time" do
    for {code, msg} <- [
          {"fn [x] -> foo(x) end", "foo(x) is not an action"},
          {"fn [x] when foo(x) -> true end", "foo(x) is not allowed in a match spec guard"},
          {"fn [x] when y > 1 -> true end", "variable y is not bound"},
          {"fn [x] when x in y -> true end", "'in' needs a literal list"},
          {~S(fn ["a" <> rest] -> true end), "cannot be bound"},
          {"fn [x = {1, 2}] -> true end", "cannot both match a pattern and bind it"},
          {"fn [%{^k => 1}] -> true end", "map keys in a match spec head must be literals"},
          {"fn x -> true end", "the head of a match is the argument list"},
          {"fn [x] when x > @limit -> true end", "module attributes"},
          {"fn [t] when tuple_size(t) == 2 -> true end", "tuple_size(t) is not allowed"},
          {"not_a_fn", "expects an fn"}
        ] do
      e =
        assert_raise CompileError, fn ->
          Code.eval_string("require Beamprobe; Beamprobe.match(#{code})", k: 1, y: 2, not_a_fn: 3)
        end

      assert Exception.message(e) =~ msg, "#{code}: #{Exception.message(e)}"
    end
  end

  test "struct and in patterns in strings select the right calls", %{io: io} do
    assert 1 ==
             Beamprobe.calls(
               "BeamprobeTest.Target.f(%BeamprobeTest.Order{status: s}, n) when s in [:paid, :sent] and n in 1..5",
               10,
               io_server: io,
               timestamp: :none
             )

    Target.f(%Order{id: 1, status: :paid}, 1)
    Target.f(%Order{id: 2, status: :new}, 1)
    Target.f(%Order{id: 3, status: :sent}, 9)
    Target.f(%{id: 4, status: :paid}, 1)
    Target.f(%Order{id: 5, status: :sent}, 5)
    ls = printed(io)
    ids = for l <- ls, [_, id] <- [Regex.run(~r/%BeamprobeTest\.Order\{id: (\d+)/, l)], do: id
    assert ids == ["1", "5"], inspect(ls)
  end

  test "string prefix patterns", %{io: io} do
    assert 1 ==
             Beamprobe.calls(~S{BeamprobeTest.Target.g("user:" <> _id)}, 10,
               io_server: io,
               timestamp: :none
             )

    Enum.each(["user:1", "usr:2", :user, "user:héllo", "use"], &Target.g/1)
    ls = printed(io)
    assert length(ls) == 2, inspect(ls)
    assert Enum.any?(ls, &(&1 =~ ~s{g("user:héllo")}))
  end

  test "pattern errors say what is wrong" do
    assert {:error, {:bad_pattern, _, _, msg}} = Beamprobe.calls("Shop.buy(x) when x > @max", 1)
    assert msg =~ "module attributes"
    assert {:error, {:bad_pattern, _, _, msg}} = Beamprobe.calls(~S{Shop.buy("a" <> rest)}, 1)
    assert msg =~ "binary_part/3"
  end

  test "tcp output with keyword options and Elixir strings (start/1 and calls/3)" do
    {:ok, l} = :gen_tcp.listen(0, [:binary, active: false, ip: {127, 0, 0, 1}])
    {:ok, port} = :inet.port(l)
    # a keyword list of tcp options, a {"host", port} address: both were
    # {:bad_option, :output, _}
    assert {:ok, s} =
             Beamprobe.start(
               calls: [{Target, :f, 2}],
               output: {:tcp, {"127.0.0.1", port}, queue: 65536, token: "t"}
             )

    {:ok, _} = Beamprobe.stop(s)

    assert 1 ==
             Beamprobe.calls({Target, :f, 2}, 1,
               output: [{:tcp, "127.0.0.1:#{port}", [queue: 65536]}]
             )

    :ok = Beamprobe.clear()
    assert {:error, {:bad_option, _, _}} = Beamprobe.start(output: {:tcp, {"127.0.0.1", 0}})
    :gen_tcp.close(l)
  end

  test "h :beamprobe.calls shows the examples as code, without <pre> tags" do
    require IEx.Helpers
    out = ExUnit.CaptureIO.capture_io(fn -> IEx.Helpers.h(:beamprobe.calls()) end)
    assert out =~ ~s|beamprobe:calls("lists:seq(A, B) when A > B -> return", 10).|
    refute out =~ "<pre>"
    refute out =~ "</pre>"
  end

  test "h Beamprobe.calls prints the docs (Elixir doc chunks)" do
    {:docs_v1, _, :elixir, _, %{"en" => moduledoc}, _, docs} = Code.fetch_docs(Beamprobe)
    assert moduledoc =~ "Production-safe tracing"

    for {f, a} <- [
          calls: 3,
          messages: 3,
          clear: 0,
          start: 1,
          stop: 1,
          info: 1,
          annotate: 1,
          match: 1
        ] do
      assert Enum.any?(docs, fn {{_, name, arity}, _, _, doc, _} ->
               name == f and arity == a and match?(%{"en" => _}, doc)
             end),
             "no doc for #{f}/#{a}"
    end

    out = capture_io(fn -> IEx.Introspection.h({Beamprobe, :calls}) end)
    assert out =~ "Traces calls matching"
    assert out =~ "def calls(pattern, limit, opts \\\\ [])"
    out = capture_io(fn -> IEx.Introspection.h(Beamprobe.Handler) end)
    assert out =~ "A behaviour for Elixir modules"
  end

  test "the Erlang application works without the Elixir modules" do
    # make elixir writes to _build/elixir/ebin only (mix test: to mix's
    # _build/test/lib/beamprobe/ebin): ebin/ has no Elixir module
    beams = Path.wildcard("ebin/Elixir.*.beam")
    assert beams == []
    refute :code.which(Beamprobe) |> to_string() |> Path.dirname() == Path.expand("ebin")
  end

  defp collect(acc) do
    receive do
      {:events, es} -> collect(acc ++ es)
    after
      500 -> acc
    end
  end
end
