defmodule Beamprobe.MatchSpec do
  @moduledoc """
  The compiler behind `Beamprobe.match/1`: an `fn` to a trace match
  specification, at macro expansion time (the ex2ms idea, for call
  tracing). Every construct a match specification cannot express is a
  `CompileError` naming it, at the line where it is written.
  """

  @guard_ops %{
    and: :andalso,
    or: :orelse,
    ==: :==,
    !=: :"/=",
    ===: :"=:=",
    !==: :"=/=",
    <: :<,
    >: :>,
    <=: :"=<",
    >=: :>=,
    +: :+,
    -: :-,
    *: :*,
    /: :/,
    div: :div,
    rem: :rem
  }

  @guard_funs [
    is_atom: 1,
    is_binary: 1,
    is_float: 1,
    is_function: 1,
    is_integer: 1,
    is_list: 1,
    is_map: 1,
    is_number: 1,
    is_pid: 1,
    is_port: 1,
    is_reference: 1,
    is_tuple: 1,
    is_map_key: 2,
    hd: 1,
    tl: 1,
    length: 1,
    map_size: 1,
    byte_size: 1,
    bit_size: 1,
    abs: 1,
    trunc: 1,
    round: 1,
    binary_part: 3,
    node: 0,
    node: 1,
    self: 0
  ]

  @doc """
  The quoted match specification of `fun` (the AST of an `fn`), for the
  macro `Beamprobe.match/1`; `env` is the caller's environment.
  """
  @spec compile(Macro.t(), Macro.Env.t()) :: Macro.t()
  def compile({:fn, _, clauses}, env), do: Enum.map(clauses, &clause(&1, env))

  def compile(other, env) do
    fail(
      env,
      other,
      "Beamprobe.match/1 expects an fn, as in " <>
        "Beamprobe.match(fn [a, b] when a > 1 -> :return end); got: #{Macro.to_string(other)}"
    )
  end

  @doc """
  `x in ^list` at run time: the guard `x =:= e1 orelse x =:= e2 ...`
  (`false` for an empty list).
  """
  @spec in_list(term(), list()) :: term()
  def in_list(_x, []), do: false
  def in_list(x, [e]), do: {:"=:=", x, {:const, e}}
  def in_list(x, [e | rest]), do: {:orelse, {:"=:=", x, {:const, e}}, in_list(x, rest)}

  # ---- clauses ---------------------------------------------------------

  defp clause({:->, _, [params, body]}, env) do
    {params, guard} =
      case params do
        [{:when, _, args}] -> {Enum.drop(args, -1), List.last(args)}
        _ -> {params, nil}
      end

    st = %{env: env, vars: %{}, extra: []}

    {head, st} =
      case params do
        [list] when is_list(list) ->
          head_list(list, st)

        [{:_, _, ctx}] when is_atom(ctx) ->
          {:_, st}

        [] ->
          {[], st}

        [one] ->
          fail(
            env,
            one,
            "the head of a match is the argument list, " <>
              "e.g. fn [a, b] -> ... end or fn a, b -> ... end; got: #{Macro.to_string(one)}"
          )

        many ->
          head_list(many, st)
      end

    guards =
      case guard do
        nil -> []
        g -> [guard(g, st)]
      end

    guards =
      case st.extra do
        [] -> guards
        extra -> [Enum.reduce(Enum.reverse(extra) ++ guards, &tup([:andalso, &2, &1]))]
      end

    tup([head, guards, body(body, st)])
  end

  # The AST of a tuple of any size.
  defp tup(elems), do: {:{}, [], elems}

  # ---- heads -----------------------------------------------------------

  defp head_list(list, st) do
    {rev, st} =
      Enum.reduce(list, {[], st}, fn
        {:|, _, [h, t]}, {acc, st} ->
          {h, st} = head(h, st)
          {t, st} = head(t, st)
          {[{:|, [], [h, t]} | acc], st}

        e, {acc, st} ->
          {e, st} = head(e, st)
          {[e | acc], st}
      end)

    {Enum.reverse(rev), st}
  end

  defp head({name, _, ctx} = v, st) when is_atom(name) and is_atom(ctx) do
    case Atom.to_string(name) do
      "_" <> _ -> {:_, st}
      _ -> bind(v, st)
    end
  end

  # A pinned value is tested in the guard (=:= with {:const, value}), not
  # put in the head: in a head, an atom :_ or :"$1" anywhere inside the
  # value would be a wildcard or a variable, and a map would match any
  # larger map, where Elixir's ^pin is an exact match.
  defp head({:^, _, [v]}, st) do
    {var, st} = fresh(st)
    check = tup([:"=:=", var, tup([:const, v])])
    {var, %{st | extra: [check | st.extra]}}
  end

  defp head({:<>, _, [prefix, rest]} = ast, st) when is_binary(prefix) do
    case rest do
      {name, _, ctx} when is_atom(name) and is_atom(ctx) ->
        if match?("_" <> _, Atom.to_string(name)) do
          {var, st} = fresh(st)
          n = byte_size(prefix)

          check =
            {:andalso, {:is_binary, var},
             {:andalso, {:>=, {:byte_size, var}, n}, {:"=:=", {:binary_part, var, 0, n}, prefix}}}

          {var, %{st | extra: [Macro.escape(check) | st.extra]}}
        else
          fail(
            st.env,
            ast,
            "the rest of a \"prefix\" <> rest pattern cannot be bound " <>
              "in a match spec (only the prefix is checked, with binary_part/3); write _#{name}"
          )
        end

      _ ->
        fail(st.env, ast, "only \"literal prefix\" <> _rest is supported in a match spec head")
    end
  end

  defp head({:%{}, _, pairs}, st) do
    {pairs, st} =
      Enum.map_reduce(pairs, st, fn {k, v}, st ->
        literal!(k, st)
        {v, st} = head(v, st)
        {{k, v}, st}
      end)

    {{:%{}, [], pairs}, st}
  end

  defp head({:%, _, [alias, {:%{}, meta, pairs}]} = ast, st) do
    case Macro.expand(alias, st.env) do
      mod when is_atom(mod) -> head({:%{}, meta, [{:__struct__, mod} | pairs]}, st)
      _ -> fail(st.env, ast, "a struct pattern needs its module name, e.g. %Shop.Order{}")
    end
  end

  defp head({:{}, _, elems}, st) do
    {elems, st} = Enum.map_reduce(elems, st, &head/2)
    {{:{}, [], elems}, st}
  end

  defp head({a, b}, st) do
    {a, st} = head(a, st)
    {b, st} = head(b, st)
    {{a, b}, st}
  end

  defp head(list, st) when is_list(list), do: head_list(list, st)

  defp head({:@, _, _} = ast, st) do
    fail(
      st.env,
      ast,
      "module attributes are not expanded in a match; pin a variable " <>
        "instead: value = #{Macro.to_string(ast)}, then ^value"
    )
  end

  defp head({:=, _, _} = ast, st) do
    fail(
      st.env,
      ast,
      "a match spec cannot both match a pattern and bind it (=); " <>
        "bind a variable and test it in the guard"
    )
  end

  defp head(lit, st) when is_atom(lit) or is_number(lit) or is_binary(lit), do: {lit, st}

  defp head({:-, _, [n]}, st) when is_number(n), do: {-n, st}

  defp head({:__aliases__, _, _} = alias, st), do: {expand_alias(alias, st), st}

  defp head(ast, st) do
    fail(
      st.env,
      ast,
      "#{Macro.to_string(ast)} is not allowed in a match spec head " <>
        "(variables, literals, tuples, lists, maps, structs, ^pinned values)"
    )
  end

  defp bind({name, _, _}, st) do
    case st.vars do
      %{^name => var} ->
        {var, st}

      vars ->
        var = :"$#{map_size(vars) + 1}"
        {var, %{st | vars: Map.put(vars, name, var)}}
    end
  end

  defp fresh(st) do
    var = :"$#{map_size(st.vars) + 1}"
    {var, %{st | vars: Map.put(st.vars, {:fresh, var}, var)}}
  end

  defp literal!(k, st) do
    unless is_atom(k) or is_number(k) or is_binary(k) do
      fail(st.env, k, "map keys in a match spec head must be literals; got #{Macro.to_string(k)}")
    end
  end

  # ---- guards and body expressions -------------------------------------

  defp guard({name, _, ctx} = ast, st) when is_atom(name) and is_atom(ctx) do
    case st.vars do
      %{^name => var} ->
        var

      _ ->
        fail(
          st.env,
          ast,
          "variable #{name} is not bound in the head; bind it in the " <>
            "argument list or pin an outer value with ^#{name}"
        )
    end
  end

  defp guard({:^, _, [v]}, _st), do: tup([:const, v])

  defp guard({:__aliases__, _, _} = alias, st), do: expand_alias(alias, st)

  defp guard({:in, _, [left, right]} = ast, st) do
    l = guard(left, st)

    case right do
      {:^, _, [v]} ->
        quote do: Beamprobe.MatchSpec.in_list(unquote(l), unquote(v))

      list when is_list(list) ->
        list =
          Enum.map(list, fn
            {:__aliases__, _, _} = a -> expand_alias(a, st)
            {:-, _, [n]} when is_number(n) -> -n
            e -> e
          end)

        Enum.each(list, &literal_in!(&1, ast, st))
        in_literal(l, list)

      {:.., _, [a, b]} when (is_integer(a) or is_tuple(a)) and (is_integer(b) or is_tuple(b)) ->
        # 5..1 is Elixir's decreasing range (step -1): x in 5..1 holds for
        # 1..5, as in a guard of Elixir 1.14
        {a, b} = Enum.min_max([range_bound!(a, right, st), range_bound!(b, right, st)])

        tup([
          :andalso,
          tup([:is_integer, l]),
          tup([:andalso, tup([:>=, l, a]), tup([:"=<", l, b])])
        ])

      _ ->
        fail(
          st.env,
          ast,
          "'in' needs a literal list, an integer range a..b or a ^pinned " <>
            "list on its right; got #{Macro.to_string(right)}"
        )
    end
  end

  defp guard({:not, _, [a]}, st), do: tup([:not, guard(a, st)])
  defp guard({:-, _, [a]}, st), do: tup([:-, guard(a, st)])

  defp guard({:is_nil, _, [a]}, st), do: tup([:==, guard(a, st), nil])

  defp guard({:elem, _, [t, i]}, st) do
    idx = if is_integer(i), do: i + 1, else: tup([:+, guard(i, st), 1])
    tup([:element, idx, guard(t, st)])
  end

  defp guard({op, _, [a, b]}, st) when is_map_key(@guard_ops, op),
    do: tup([Map.fetch!(@guard_ops, op), guard(a, st), guard(b, st)])

  # Elixir's is_map_key(map, key); the match spec's is_map_key(Key, Map).
  defp guard({:is_map_key, _, [m, k]}, st),
    do: tup([:is_map_key, guard(k, st), guard(m, st)])

  defp guard({f, _, args} = ast, st) when is_atom(f) and is_list(args) do
    if {f, length(args)} in @guard_funs do
      tup([f | Enum.map(args, &guard(&1, st))])
    else
      refuse(ast, st)
    end
  end

  # a tuple built in a guard or body is written {{...}} in a match spec
  defp guard({a, b}, st), do: tup([tup([guard(a, st), guard(b, st)])])

  defp guard({:{}, _, elems}, st), do: tup([tup(Enum.map(elems, &guard(&1, st)))])

  defp guard(list, st) when is_list(list) do
    Enum.map(list, fn
      {:|, _, [h, t]} -> {:|, [], [guard(h, st), guard(t, st)]}
      e -> guard(e, st)
    end)
  end

  defp guard(lit, _st) when is_atom(lit) or is_number(lit) or is_binary(lit), do: lit


  defp guard(ast, st), do: refuse(ast, st)

  defp refuse({:@, _, _} = ast, st) do
    fail(
      st.env,
      ast,
      "module attributes are not expanded in a match; pin a variable " <>
        "instead: value = #{Macro.to_string(ast)}, then ^value"
    )
  end

  defp refuse(ast, st) do
    allowed = @guard_funs |> Keyword.keys() |> Enum.uniq() |> Enum.join(", ")

    fail(
      st.env,
      ast,
      "#{Macro.to_string(ast)} is not allowed in a match spec guard; " <>
        "allowed: comparisons, and/or/not, + - * / div rem, in, elem/2, is_nil/1, #{allowed}"
    )
  end

  defp literal_in!(e, ast, st) do
    unless is_atom(e) or is_number(e) or is_binary(e) do
      fail(
        st.env,
        ast,
        "'in' needs a list of literals (atoms, numbers, strings); " <>
          "got #{Macro.to_string(e)}"
      )
    end
  end

  # a bound of an integer range: 5, -5 (the AST {:-, _, [5]}) or +5
  defp range_bound!(n, _right, _st) when is_integer(n), do: n
  defp range_bound!({:-, _, [n]}, _right, _st) when is_integer(n), do: -n
  defp range_bound!({:+, _, [n]}, _right, _st) when is_integer(n), do: n

  defp range_bound!(_, right, st) do
    fail(
      st.env,
      right,
      "'in' needs a literal list, an integer range a..b or a ^pinned " <>
        "list on its right; got #{Macro.to_string(right)}"
    )
  end

  defp in_literal(_l, []), do: false
  defp in_literal(l, [e]), do: tup([:"=:=", l, e])
  defp in_literal(l, [e | rest]), do: tup([:orelse, tup([:"=:=", l, e]), in_literal(l, rest)])

  # ---- bodies ----------------------------------------------------------

  defp body({:__block__, _, exprs}, st), do: Enum.map(exprs, &action(&1, st))
  defp body(list, st) when is_list(list), do: Enum.map(list, &action(&1, st))
  defp body(one, st), do: [action(one, st)]

  defp action(:return, _st), do: tup([:return_trace])
  defp action({:return_trace, _, []}, _st), do: tup([:return_trace])
  defp action(:exception, _st), do: tup([:exception_trace])
  defp action({:exception_trace, _, []}, _st), do: tup([:exception_trace])
  defp action(:caller, _st), do: tup([:message, tup([:caller])])
  defp action({:caller, _, []}, _st), do: tup([:message, tup([:caller])])
  defp action({:message, _, [e]}, st), do: tup([:message, guard(e, st)])
  defp action(b, _st) when is_boolean(b), do: b

  defp action(ast, st) do
    fail(
      st.env,
      ast,
      "#{Macro.to_string(ast)} is not an action of a trace match spec; " <>
        "use true, :return, :exception, :caller, message(expr) or a list of these"
    )
  end

  # Shop or an alias of the caller's (alias MyApp.Shop) as its module atom.
  defp expand_alias(alias, st) do
    case Macro.expand(alias, st.env) do
      mod when is_atom(mod) -> mod
      _ -> fail(st.env, alias, "cannot expand #{Macro.to_string(alias)} to a module name")
    end
  end

  defp fail(env, ast, msg) do
    line =
      case ast do
        {_, meta, _} when is_list(meta) -> Keyword.get(meta, :line, env.line)
        _ -> env.line
      end

    raise CompileError, file: env.file, line: line, description: msg
  end
end
