defmodule BeamprobeTest.OutputTest do
  # The Elixir syntax of captured terms, compared with Elixir's own
  # inspect/2 under the same limits: capture `list` = inspect `limit`,
  # capture `binary` = inspect `printable_limit`.  The expected strings
  # are made by the installed Elixir at test time, never written here.
  use ExUnit.Case, async: false

  alias BeamprobeTest.{Order, Target}

  @big %{depth: 64, list: 4096, binary: 65536, bytes: 65536}

  # The text the tracer captures (bp_term.c, via the test NIF), then
  # re-rendered as the printer and `print --syntax elixir` do.
  defp elixir(term, cap \\ @big) do
    :beamprobe_nif.elixir_text(:beamprobe_nif.render(term, cap), :term)
  end

  defp table do
    [
      :apple,
      :"foo bar",
      :valid?,
      :run!,
      :foo@bar,
      nil,
      true,
      false,
      Shop,
      Shop.Order,
      :"Elixir.foo",
      :Foo,
      :"it's",
      :"a\"b",
      :+,
      :"::",
      :héllo,
      :"€",
      :日本,
      :"a€",
      :ñandú,
      0,
      -5,
      2 ** 70,
      -(2 ** 70),
      1.5,
      1.0e10,
      1.0e15,
      1.0e16,
      1.0e22,
      -0.0,
      0.1,
      1.0e-5,
      123_456.0,
      -1000.0,
      1.2345678901234568e17,
      "héllo",
      "",
      "a\"b\\c",
      "x\#{y}",
      "line\nnext\ttab",
      <<1, 2, 3>>,
      <<255>>,
      "€",
      <<7>>,
      <<127>>,
      <<0>>,
      "a\0",
      <<1, 2, 5::3>>,
      <<5::3>>,
      <<0xC3>>,
      "日本語",
      'abc',
      'it\'s',
      'a\#{b}',
      [7],
      [233],
      [1000],
      [104, 233],
      '\e',
      [1, [2, 3]],
      [1 | 2],
      [],
      [:a | :b],
      [1, 2 | 3],
      [a: 1, b: "x"],
      [{:a, 1}, {:b, 2, 3}],
      [{Shop, 1}],
      ["my key": 1],
      [{:ok, [c: 1]}],
      {},
      {:ok, 1},
      {:error, {:nested, [1, 2]}, %{}},
      {1, 2, 3, 4},
      %{},
      %{a: 1},
      %{1 => 2, :a => 3},
      %{"k" => [1]},
      %{{1, 2} => :t},
      %{Shop => 1},
      %{nil: 1, true: 2},
      %{a: %{b: %{c: 1}}},
      %Order{id: 1, items: ["apple"], status: :paid},
      %Order{},
      RuntimeError.exception("boom"),
      %ArgumentError{message: "bad"},
      [%Order{id: 2}],
      {:ok, %Order{status: :sent}},
      self(),
      hd(Port.list()),
      make_ref(),
      &:lists.seq/2,
      &Enum.map/2,
      {self(), make_ref(), "ok"},
      # C1 controls and the BOM are escaped; \\ and <- are operators
      String.to_atom(<<0x85::utf8>>),
      String.to_atom("a" <> <<0x9F::utf8>>),
      [{String.to_atom("k" <> <<0x80::utf8>>), 1}],
      "\uFEFF",
      String.to_atom("a b\uFEFF"),
      String.to_atom("a b\uFFFE"),
      :\\,
      [\\: 1],
      %{:\\ => 1, 2 => 3},
      :<-,
      [<-: 1],
      # Elixir.-prefixed keys (aliases or not) are no keyword keys;
      # Elixir itself is one, quoted
      [{:"Elixir.foo", 1}],
      [{:"Elixir.Foo.1", 1}, {:a, 2}],
      %{:"Elixir.A-B" => 1, :a => 2},
      [{:"Elixir.", 1}],
      [{Elixir, 1}],
      %{Elixir => 1, :a => 2},
      :"Elixir.Elixir",
      :"Elixir.Elixir.Foo",
      :"Elixir.Foo.Elixir",
      # names after Module. as Macro.inspect_atom(:remote_call, _)
      Function.capture(Shop, :Abc, 1),
      Function.capture(Shop, :"a@b", 1),
      Function.capture(Shop, :%{}, 1),
      Function.capture(Shop, :.., 0),
      Function.capture(Shop, :"::", 2),
      Function.capture(Shop, :<-, 2),
      Function.capture(Shop, :\\, 2),
      Function.capture(Shop, :valid?, 1),
      Function.capture(:"Elixir.Elixir", :f, 0),
      # a charlist the capture wrote as integers (\b): #{ still escaped
      [?a, 8, ?#, ?{, 7]
    ]
  end

  test "every term of the table prints as inspect/2 prints it" do
    bad = for t <- table(), (got = elixir(t)) != (want = inspect(t)), do: {t, got, want}

    assert bad == [], "differs from inspect/2:\n" <> describe(bad)
  end

  test "quoted atoms and strings escape each code point as inspect/2 does" do
    cps = Enum.concat([0..0x2FFF, 0xE000..0xFFFF, 0x10000..0x100FF, 0x10FFF0..0x10FFFF])

    bad =
      for c <- cps,
          t <- [String.to_atom("a b" <> <<c::utf8>>), "x" <> <<c::utf8>>],
          (got = elixir(t)) != (want = inspect(t)),
          do: {t, got, want}

    assert bad == [], "differs from inspect/2:\n" <> describe(Enum.take(bad, 20))
  end

  test "cut terms: the same text as inspect/2 with the same limits" do
    rows = [
      {Enum.to_list(1..30), 5, 64},
      {{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 3, 64},
      {Map.new(1..10, &{&1, &1}), 3, 64},
      {Map.new(1..10, &{:"k#{&1}", &1}), 4, 64},
      {[a: 1, b: 2, c: 3, d: 4], 2, 64},
      {String.duplicate("a", 100), 16, 10},
      {String.duplicate("ab\n", 30), 16, 7},
      {'abcdefghijklmnopqrstuvwxyz', 5, 5},
      {List.duplicate(7, 40), 5, 5},
      {:binary.copy(<<1, 2>>, 50), 6, 6},
      {Enum.to_list(1..20) |> List.to_tuple(), 20, 64}
    ]

    bad =
      for {t, list, bin} <- rows,
          cap = %{@big | list: list, binary: bin},
          (got = elixir(t, cap)) != (want = inspect(t, limit: list, printable_limit: bin)),
          do: {t, got, want}

    assert bad == [], "differs from inspect/2 under the same limits:\n" <> describe(bad)
  end

  test "maps of more than 32 keys: the same entries, in the capture's order" do
    # the capture walks a large map in the NIF iterator's order, inspect/2
    # in :maps.to_list's (docs/elixir.md)
    entries = fn text ->
      text
      |> String.trim_leading("%{")
      |> String.trim_trailing("}")
      |> String.split(", ")
      |> Enum.sort()
    end

    for t <- [Map.new(1..40, &{&1, &1}), Map.new(1..40, &{"s#{&1}", [&1]})] do
      assert entries.(elixir(t)) == entries.(inspect(t, limit: :infinity))
    end
  end

  test "the binary limit counts bytes, inspect's printable_limit characters" do
    s = String.duplicate("é", 50)
    assert elixir(s, %{@big | binary: 20}) == inspect(s, printable_limit: 10)
  end

  test "a cut struct shows one field fewer: the capture's list limit counts __struct__" do
    o = %Order{id: 1, items: [], status: :paid}
    assert elixir(o, %{@big | list: 3}) == inspect(o, limit: 2)
  end

  test "a UTF-8 binary cut inside a character ends at the last whole character" do
    # "é" is two bytes: 5 bytes hold two whole é and half of the third
    assert elixir("ééé", %{@big | binary: 5}) == ~S("éé" <> ...)
  end

  test "the byte limit cuts the text with a final ..." do
    t = {:ok, Enum.to_list(1..300), String.duplicate("x", 300)}
    erl = :beamprobe_nif.render(t, %{@big | bytes: 40})
    assert String.ends_with?(erl, "...")
    text = :beamprobe_nif.elixir_text(erl, :term)
    assert String.ends_with?(text, "...")
    assert String.starts_with?(text, "{:ok, [1, 2, 3")
    assert byte_size(text) <= 5 * byte_size(erl) + 64
  end

  test "structs are recognised from __struct__ alone, the module need not exist" do
    t = %{__struct__: :"Elixir.No.Such.Module", id: 7}
    refute Code.ensure_loaded?(No.Such.Module)
    assert elixir(t) == "%No.Such.Module{id: 7}"
    # a __struct__ that is not a module alias: a plain map
    assert elixir(%{__struct__: :lower, id: 7}) == inspect(%{__struct__: :lower, id: 7})
  end

  test "depth-cut containers keep their markers" do
    cap = %{@big | depth: 2}
    assert :beamprobe_nif.render([[[[1]]]], cap) == "[[[...]]]"
    assert elixir([[[[1]]]], cap) == "[[[...]]]"
    assert elixir({{{{1}}}}, cap) == "{{{...}}}"
    assert elixir(%{a: %{b: %{c: 1}}}, cap) == "%{a: %{b: %{...}}}"
    assert elixir([[<<1, 2>>]], cap) == "[[<<...>>]]"
  end

  test "mfa, argument lists and names" do
    mfa = :beamprobe_nif.render_mfa(Shop.Order, :buy, 2)
    assert :beamprobe_nif.elixir_text(mfa, :mfa) == "Shop.Order.buy/2"

    assert :beamprobe_nif.elixir_text(:beamprobe_nif.render_mfa(:lists, :seq, 2), :mfa) ==
             ":lists.seq/2"

    assert :beamprobe_nif.elixir_text(:beamprobe_nif.render_mfa(Shop, :"odd name", 1), :mfa) ==
             ~S(Shop."odd name"/1)

    args = [:apple, 2, "héllo", %Order{id: 1}]
    text = :beamprobe_nif.render_args(args, @big)
    want = "(" <> Enum.map_join(args, ", ", &inspect/1) <> ")"
    assert :beamprobe_nif.elixir_text(text, :args) == want
    cut = :beamprobe_nif.render_args(Enum.to_list(1..5), %{@big | list: 2})
    assert :beamprobe_nif.elixir_text(cut, :args) == "(1, 2, ...)"
    assert :beamprobe_nif.elixir_text("'Elixir.Shop.Server'", :name) == "Shop.Server"
    assert :beamprobe_nif.elixir_text("my_server", :name) == "my_server"
  end

  test "hostile text is copied, never crashes, always bounded" do
    for s <- [
          "",
          "[",
          "<<\"",
          "\#{",
          "'unterminated",
          "<<1,2",
          "{a,",
          "]]]",
          "#Fun<",
          String.duplicate("[", 5000),
          String.duplicate("{a,", 3000),
          <<0xFF, 0xFE>>,
          "fun ",
          "16#",
          "-",
          "<<...>>",
          "\"\\x{",
          "'\\"
        ] do
      for kind <- [:term, :args, :mfa, :name] do
        out = :beamprobe_nif.elixir_text(s, kind)
        assert is_binary(out)
        assert byte_size(out) <= 5 * byte_size(s) + 64
      end
    end

    for _ <- 1..2000 do
      s = :crypto.strong_rand_bytes(:rand.uniform(64))
      assert is_binary(:beamprobe_nif.elixir_text(s, :term))
    end
  end

  test "a real trace: the printer's lines show the arguments as inspect/2 does" do
    {:ok, io} = StringIO.open("")
    terms = [[:apple, 2], ["héllo", %Order{id: 1, status: :paid}], [[a: 1], {self(), 'abc'}]]

    assert 1 ==
             Beamprobe.calls("BeamprobeTest.Target.f/2", length(terms),
               io_server: io,
               timestamp: :none
             )

    for [a, b] <- terms, do: Target.f(a, b)
    lines = wait_lines(io, length(terms))
    Beamprobe.clear()

    for [a, b] <- terms do
      want = "call BeamprobeTest.Target.f(#{inspect(a)}, #{inspect(b)})"
      assert Enum.any?(lines, &String.contains?(&1, want)), "#{want} not in #{inspect(lines)}"
    end

    assert Enum.all?(lines, &String.starts_with?(&1, "#PID<"))
  end

  test "bin/beamprobe print --syntax elixir prints the trace's terms as inspect/2 does" do
    dir = Path.join(System.tmp_dir!(), "bp_ex_print_#{System.unique_integer([:positive])}")
    on_exit(fn -> File.rm_rf(dir) end)
    terms = [[:apple, 2], ["héllo", %Order{id: 1, status: :paid}], [%{"k" => [1.0e10]}, <<1, 2>>]]

    {:ok, s} =
      Beamprobe.start(
        calls: [{Target, :f, 2}],
        return: true,
        procs: [self()],
        output: {:file, dir}
      )

    for [a, b] <- terms, do: Target.f(a, b)
    assert {:ok, %{events: 6}} = Beamprobe.stop(s)
    cli = Path.expand("bin/beamprobe")
    {out, 0} = System.cmd(cli, ["print", "--syntax", "elixir", dir])

    for [a, b] <- terms do
      assert out =~ "call BeamprobeTest.Target.f(#{inspect(a)}, #{inspect(b)})"
      assert out =~ "returned from BeamprobeTest.Target.f/2 -> #{inspect({a, b})}"
    end

    assert out =~ "#PID<"
    {erl, 0} = System.cmd(cli, ["print", dir])
    assert erl =~ "'Elixir.BeamprobeTest.Target':f(apple, 2)"
    {_, 1} = System.cmd(cli, ["print", "--syntax", "cobol", dir], stderr_to_stdout: true)
  end

  test "terms cut by the byte limit stay Elixir syntax, the cut shown once" do
    cap = %{depth: 64, list: 4096, binary: 65536, bytes: 120}
    # Cut right after a whole element: was the raw Erlang text, é as Ã©.
    cut1 = elixir(List.duplicate(String.duplicate("é", 30), 16), cap)
    assert String.starts_with?(cut1, ~s(["ééé)), cut1
    assert String.ends_with?(cut1, "..."), cut1
    refute cut1 =~ "<<", cut1
    refute cut1 =~ "Ã", cut1
    # Cut inside a string: the dots are the cut's, not the string's.
    cut2 = elixir(List.duplicate(String.duplicate("x", 60), 15), cap)
    refute cut2 =~ ~s(x..."), cut2
    assert cut2 =~ ~s(" <> ...), cut2
    assert :beamprobe_nif.elixir_text(~S|(<<"xxxxxxxx...|, :args) == ~S|("xxxxxxxx" <> ...|
    assert :beamprobe_nif.elixir_text(~S|([<<"ab">>,<<"cd">>...|, :args) == ~S|(["ab", "cd", ...|
  end

  defp wait_lines(io, n, tries \\ 100) do
    {_, out} = StringIO.contents(io)
    lines = out |> String.split("\n", trim: true) |> Enum.reject(&String.starts_with?(&1, "%"))

    cond do
      length(lines) >= n -> lines
      tries == 0 -> flunk("expected #{n} lines, got: #{inspect(out)}")
      true -> Process.sleep(50) && wait_lines(io, n, tries - 1)
    end
  end

  defp describe(bad) do
    Enum.map_join(bad, "\n", fn {t, got, want} ->
      "  #{inspect(t, limit: 5)}: got #{got}, inspect/2: #{want}"
    end)
  end
end
