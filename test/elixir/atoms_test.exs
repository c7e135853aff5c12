defmodule BeamprobeTest.AtomsTest do
  # Atoms of every kind -- operators, quoted, Latin-1, Cyrillic, CJK,
  # mixed scripts, with ? and !, aliases -- through the Elixir pattern
  # language and through the Elixir printer, with the installed Elixir as
  # the oracle: the pattern text is how Elixir writes the atom (inspect/2,
  # Macro.inspect_atom/2), and it must denote that atom; the printer must
  # write it as inspect/2 does.
  use ExUnit.Case, async: true

  @ops ~w(+ - * / ++ -- ** .. <> == != === !== < > <= >= =~ && || ! &&& |||
          ^^^ ~~~ <<< >>> |> <<~ ~>> <~ ~> <~> <|> = | & ^ @ :: <- \\\\ ..//
          in not and or when)a
  @words ~w(ok valid? run! héllo café ÿ Émile ßtraße привет Привет日 日本 日本? 日本!
            αβ λx_1 名前_x a日 x日本語 Ünïcode µ Aµ ª º test_µ)
  @quoted [:"", :"a b", :"a\"b", :"a\\b", :"x\ny", :"x#y", :"1a", :"a-b", :"Elixir.Foo",
           :"Elixir.Foo.Bar", :"Elixir.foo", :"Elixir", :"Foo", :"😀", String.to_atom("_x"), :nil, :true,
           :end, :fn, :do, :"<<>>", :"{}", :"%{}", :%, :"->", :"=>", :"...", :".",
           String.to_atom(String.duplicate("a", 255)),
           String.to_atom(String.duplicate("日", 255))]

  defp atoms, do: @ops ++ Enum.map(@words, &String.to_atom/1) ++ @quoted

  defp parse(text), do: :beamprobe_pattern.parse(text, %{force: true})

  test "a pattern names any atom as Elixir writes it" do
    bad =
      for a <- atoms(),
          {text, want} <- [
            {"Mod.f(#{inspect(a)})", &match?({:ok, %{match_spec: [{[^a], [], []}]}}, &1)},
            {"Mod.#{Macro.inspect_atom(:remote_call, a)}/1",
             &match?({:ok, %{mfa: {Mod, ^a, 1}}}, &1)},
            {"Mod.#{Macro.inspect_atom(:remote_call, a)}(x) when x > 1",
             &match?({:ok, %{mfa: {Mod, ^a, 1}}}, &1)},
            {"Mod.f(x) when x == #{inspect(a)}",
             &match?({:ok, %{match_spec: [{[:"$1"], [{op, :"$1", c}], []}]}}
                     when op in [:==, :"=:="] and c in [a, {:const, a}], &1)}
          ],
          # :"_" in a head is the wildcard, Mod._ every function
          a != :_,
          result = parse(text),
          not want.(result),
          do: {text, result}

    assert bad == []
  end

  test "an atom module: :mod.f/1 as Elixir writes it" do
    bad =
      for a <- atoms(),
          # (Elixir itself reads :...f, :..f and :when.f otherwise)
          a not in [:..., :.., :., :when],
          text = "#{inspect(a)}.f/1",
          result = parse(text),
          not match?({:ok, %{mfa: {^a, :f, 1}}}, result),
          do: {text, result}

    assert bad == []
  end

  test "errors point at the column as written, after operators and Unicode names" do
    # Kernel.+/x: the x is column 10 of what was written
    assert {:error, {10, _}} = parse("Kernel.+/x")
    assert {:error, {12, _}} = parse("Mod.f(:日本, ]")
    assert {:error, {7, msg}} = parse("Mod.f(日本)")
    assert to_string(msg) =~ "variable"
  end

  # The differences docs/elixir.md lists (section 7) that these atoms
  # show: µ, which Elixir normalizes (NFKC) after a capital.
  @known [:"Aµ"]

  # Letters of scripts (and digits, '_'), two by two and three by three:
  # mixed scripts Elixir accepts (Latin with Han and kana, Bopomofo or
  # Hangul) or quotes (Latin with Cyrillic, Greek, ...).
  @letters ["a", "Z", "é", "Ö", "ĳ", "ǅ", "ə", "ж", "Ж", "α", "Ω", "日", "ア", "あ", "ー",
            "한", "ㄅ", "א", "ب", "क", "ก", "ა", "ሀ", "ก", "ʼ", "_", "1", "·", "@"]

  defp mixed do
    for x <- @letters, y <- @letters, z <- ["", "a", "日", "?", "!"], do: String.to_atom(x <> y <> z)
  end

  test "the printer writes an atom as inspect/2, but for the documented cases" do
    cap = %{depth: 8, list: 64, binary: 1024, bytes: 4096}

    diff =
      for a <- Enum.uniq(atoms() ++ [:"alpha_β", :"ǅ", :"ĳ"] ++ mixed()),
          got = :beamprobe_nif.elixir_text(:beamprobe_nif.render(a, cap), :term),
          got != inspect(a),
          do: a

    assert Enum.sort(diff) == Enum.sort(@known)
  end

  # A traced function's name as the printer writes it (Mod.+/2,
  # Mod."Привет"/1) is Elixir's, and reads back as a pattern.
  test "a function's name prints as Elixir writes it and parses back" do
    bad =
      for a <- Enum.uniq(atoms() ++ mixed()),
          a not in [:Aµ],
          text = IO.chardata_to_string(:io_lib.format(~c"'Elixir.Mod':~tw/1", [a])),
          got = :beamprobe_nif.elixir_text(text, :mfa),
          back = parse(got),
          got != "Mod.#{Macro.inspect_atom(:remote_call, a)}/1" or
            not match?({:ok, %{mfa: {Mod, ^a, 1}}}, back) and a != :_,
          do: {a, got, back}

    assert bad == []
  end
end
