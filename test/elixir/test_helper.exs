# Loaded first by test/elixir/run.sh: the Erlang application and the
# compiled Elixir modules are on the path (-pa ebin -pa _build/elixir/ebin).
ExUnit.start(timeout: 60_000)

defmodule BeamprobeTest.Target do
  @moduledoc false
  # The traced functions (never inlined: called remotely).
  def f(a, b), do: {a, b}
  def g(a), do: a
end

defmodule BeamprobeTest.Order do
  @moduledoc false
  # Fields in alphabetical order: the capture prints a struct's fields in
  # key order, inspect/2 in definition order (docs/elixir.md).
  defstruct [:id, :items, :status]
end

defmodule BeamprobeTest.Collector do
  @moduledoc false
  use Beamprobe.Handler

  @impl true
  def init(parent), do: {:ok, parent}

  @impl true
  def handle_events(events, parent) do
    send(parent, {:events, events})
    {:ok, parent}
  end
end
