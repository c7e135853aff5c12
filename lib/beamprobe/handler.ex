defmodule Beamprobe.Handler do
  @moduledoc """
  A behaviour for Elixir modules that receive a session's events, in
  batches, as maps (the Erlang behaviour `:beamprobe_handler`).

      defmodule MyHandler do
        use Beamprobe.Handler

        @impl true
        def init(parent), do: {:ok, parent}

        @impl true
        def handle_events(events, parent) do
          for e <- events, do: send(parent, {:event, Beamprobe.Handler.elixir(e)})
          {:ok, parent}
        end
      end

      {:ok, s} = Beamprobe.start(calls: [{Shop, :buy, 2}],
                                 output: {:handler, MyHandler, self()})

  Each event is a map with `:event` (`:call`, `:return_from`, `:send`, ...,
  or `:dropped` with `:count` when events were lost, per cause, and
  `:session_wide`: of them, the session's losses at the source, of any
  kind and process, not only of those this handler receives), `:ts` (monotonic
  ns), `:pid`, and the event's fields (`:mfa`, `:args`, `:result`,
  `:message`, ...) as binaries holding the captured text in Erlang
  syntax; `elixir/1` gives them in Elixir syntax.

  Flow control: the session sends a batch only while the handler holds a
  credit, and the handler gives one back after each `handle_events/2`; a
  handler that falls behind loses whole batches (reported as a `:dropped`
  event), never memory. The handler runs in its own process, is never
  traced by its session, and is killed if it has not ended 5 seconds
  after its session ends (e.g. one blocked in `handle_events/2`).
  """

  @typedoc "An event: `%{event: :call, ts: 123, pid: pid, mfa: \"m:f/1\", ...}`."
  @type event :: %{required(:event) => atom(), optional(atom()) => term()}

  @doc "Called in the handler process before tracing starts."
  @callback init(arg :: term()) :: {:ok, state :: term()} | {:error, term()}

  @doc "A batch of events; `{:stop, state}` ends the session."
  @callback handle_events([event()], state :: term()) ::
              {:ok, state :: term()} | {:stop, state :: term()}

  @doc "The session ended (`reason`: why); the return value is ignored."
  @callback terminate(reason :: term(), state :: term()) :: term()

  @doc false
  defmacro __using__(_opts) do
    quote do
      @behaviour Beamprobe.Handler

      @impl true
      def terminate(_reason, _state), do: :ok

      defoverridable terminate: 2
    end
  end

  @text_fields %{
    mfa: :mfa,
    args: :args,
    name: :name,
    result: :term,
    message: :term,
    reason: :term,
    to_text: :term,
    other_text: :term,
    tag: :term,
    value: :term
  }

  @doc """
  The event with its captured texts in Elixir syntax, as the shell
  printer and `bin/beamprobe print --syntax elixir` print them.

      iex> Beamprobe.Handler.elixir(%{event: :call, mfa: "'Elixir.Shop':buy/2", args: "(apple, 2)"})
      %{event: :call, mfa: "Shop.buy/2", args: "(:apple, 2)"}
  """
  @spec elixir(event()) :: event()
  def elixir(event) when is_map(event) do
    Map.new(event, fn
      {k, v} when is_binary(v) and is_map_key(@text_fields, k) ->
        {k, :beamprobe_nif.elixir_text(v, Map.fetch!(@text_fields, k))}

      kv ->
        kv
    end)
  end
end
