# mix.exs -- beamprobe as a mix project or dependency:
#
#     {:beamprobe, path: "../beamprobe"}
#     {:beamprobe, git: "https://.../beamprobe.git", tag: "v0.1.0"}
#
# `mix compile` runs the project's make first (the :beamprobe_make
# compiler below: the NIF priv/beamprobe_nif.so, the CLI bin/beamprobe and
# the EEP-48 doc chunks doc/chunks), then mix compiles src/*.erl and
# lib/**/*.ex itself.  No hex package is needed.  The application's
# metadata (version, env, registered names, runtime dependencies) is read
# from src/beamprobe.app.src, the one copy rebar3 and make use too.
defmodule Beamprobe.MixProject do
  use Mix.Project

  @app_src Path.join(__DIR__, "src/beamprobe.app.src")
  @external_resource @app_src
  {:ok, [{:application, :beamprobe, props}]} = :file.consult(@app_src)
  @props props

  # The oldest OTP beamprobe runs on (see src/beamprobe.app.src).
  @min_otp 25

  def project do
    check_otp!()

    [
      app: :beamprobe,
      version: to_string(@props[:vsn]),
      elixir: "~> 1.14",
      description: to_string(@props[:description]),
      compilers: [:beamprobe_make] ++ Mix.compilers(),
      erlc_paths: ["src"],
      erlc_include_path: "include",
      erlc_options: [:debug_info],
      elixirc_paths: ["lib"],
      # `mix test`: the ExUnit suite (test/elixir/run.sh runs the same
      # files against make's build)
      test_paths: ["test/elixir"],
      deps: []
    ]
  end

  def application do
    [
      mod: @props[:mod],
      registered: @props[:registered],
      env: @props[:env],
      runtime_dependencies: @props[:runtime_dependencies],
      extra_applications: @props[:applications] -- [:kernel, :stdlib]
    ]
  end

  defp check_otp! do
    otp = :erlang.system_info(:otp_release) |> to_string() |> String.to_integer()

    if otp < @min_otp do
      Mix.raise("beamprobe needs Erlang/OTP #{@min_otp} or later; this is OTP #{otp}")
    end
  end
end

defmodule Mix.Tasks.Compile.BeamprobeMake do
  @moduledoc """
  Builds beamprobe's native parts with the project's Makefile
  (`make c cli chunks`): priv/beamprobe_nif.so, bin/beamprobe and
  doc/chunks/*.chunk, then makes bin/ and doc/ appear next to the ebin/
  mix writes (as mix does with priv/), so that
  `Path.join(:code.lib_dir(:beamprobe), "bin/beamprobe")` is the CLI and
  `h :beamprobe.calls` finds the docs.  `MAKE` chooses the make program
  (default: gmake if present, else make).
  """
  use Mix.Task.Compiler

  @root __DIR__
  @targets ~w(c cli chunks)

  @impl true
  def run(_args) do
    make = System.get_env("MAKE") || System.find_executable("gmake") || "make"

    unless System.find_executable(make) do
      Mix.raise("beamprobe: `#{make}` was not found; the NIF and the CLI need make and a C compiler")
    end

    # Silent when everything is up to date (make -s prints nothing then).
    {_, status} =
      System.cmd(make, ["-s", "--no-print-directory" | @targets],
        cd: @root,
        into: IO.stream(:stdio, :line),
        stderr_to_stdout: true
      )

    if status != 0 do
      Mix.raise("beamprobe: `#{make} #{Enum.join(@targets, " ")}` failed (exit #{status}) in #{@root}")
    end

    link_build_dirs(Mix.Project.app_path())
    {:ok, []}
  end

  @impl true
  def clean do
    make = System.get_env("MAKE") || System.find_executable("gmake") || "make"

    for dir <- ["c_src", "c_src/cli"] do
      System.cmd(make, ["-C", dir, "clean"], cd: @root, stderr_to_stdout: true)
    end

    File.rm_rf(Path.join(@root, "doc/chunks"))
    :ok
  end

  # bin/ and doc/ of the source next to the build's ebin/: a link, or a
  # fresh copy where mix copies instead of linking (build_embedded, or a
  # file system without links); priv/ is mix's own, refreshed when it is
  # a copy made before make built the NIF.
  defp link_build_dirs(app_path) do
    if Path.expand(app_path) != Path.expand(@root) do
      File.mkdir_p!(app_path)

      for dir <- ~w(bin doc priv) do
        src = Path.join(@root, dir)
        dst = Path.join(app_path, dir)

        case File.read_link(dst) do
          {:ok, _} ->
            :ok

          {:error, _} ->
            if dir == "priv" and File.dir?(dst) do
              File.cp_r!(src, dst)
            else
              File.rm_rf!(dst)
              Mix.Utils.symlink_or_copy(src, dst)
            end
        end
      end
    end

    :ok
  end
end
