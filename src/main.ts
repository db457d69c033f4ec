/**
 * The `mcp-store` program: parse the command line, start the server, print the banner, apply hand
 * edits of the services file with --reload, open the docs with --open, and shut down cleanly on
 * SIGINT/SIGTERM (every child process ended before exit).
 */
import { CommandLineExit, parseCommandLine } from "./config/cli.js"
import { OptionsError, type Options } from "./config/options.js"
import { ServicesFileError } from "./config/services-file.js"
import { startServer, type RunningServer } from "./http/server.js"
import { VERSION } from "./version.js"

const isLoopback = (host: string) => host === "localhost" || host === "::1" || host.startsWith("127.")

const banner = (options: Options, running: RunningServer): string => {
  const services = running.store.allServiceActors().length
  const lines = [
    `mcp-store ${VERSION}`,
    `  listening on   http://${options.server.host}:${running.port}`,
    `  services file  ${options.store.mcpConfigFile} (${services} service${services === 1 ? "" : "s"})`,
    `  API docs       ${running.url}/docs`,
    `  reload         ${options.server.reload ? "on: hand edits of the services file are applied" : "off"}`
  ]
  return lines.join("\n")
}

/** Runs the program; resolves with the exit code when the server has stopped (or failed to start). */
export const main = async (argv: ReadonlyArray<string>): Promise<number> => {
  let options: Options
  try {
    options = await parseCommandLine(argv, process.env)
  } catch (e) {
    if (e instanceof CommandLineExit) return e.exitCode
    if (e instanceof OptionsError) {
      process.stderr.write(`mcp-store: ${e.message}\n`)
      return 2
    }
    throw e
  }
  const quiet = options.server.logLevel === "warning" || options.server.logLevel === "error"
  // Signals are ours from here on: one that arrives while the server starts (local services may
  // already run) is kept and acted on once the server runs, instead of killing the process.
  let requested: NodeJS.Signals | undefined
  let onSignal = (signal: NodeJS.Signals) => {
    requested ??= signal
  }
  const handler = (signal: NodeJS.Signals) => onSignal(signal)
  process.on("SIGINT", handler)
  process.on("SIGTERM", handler)
  let running: RunningServer
  try {
    running = await startServer({ server: options.server, store: options.store })
  } catch (e) {
    process.off("SIGINT", handler)
    process.off("SIGTERM", handler)
    const message =
      e instanceof ServicesFileError
        ? `cannot read the services file ${e.message}`
        : (e as NodeJS.ErrnoException).code === "EADDRINUSE"
          ? `port ${options.server.port} on ${options.server.host} is already in use`
          : e instanceof Error
            ? e.message
            : String(e)
    process.stderr.write(`mcp-store: ${message}\n`)
    return 1
  }
  if (options.server.showStartupInfo && !quiet) process.stdout.write(`${banner(options, running)}\n`)
  if (options.server.apiKey === undefined && !isLoopback(options.server.host)) {
    process.stderr.write(
      `mcp-store: WARNING: listening on ${options.server.host} without an API key: anyone who reaches port ${running.port} ` +
        `can run commands on this machine through add_service. Set --api-key (or MCPSTORE_API_KEY), ` +
        `listen on 127.0.0.1, or use --no-local-services.\n`
    )
  }
  if (options.server.reload) {
    running.store.watchFile((summary) => {
      const changes = [...summary.added.map((n) => `+${n}`), ...summary.updated.map((n) => `~${n}`), ...summary.removed.map((n) => `-${n}`)]
      if (changes.length > 0 && !quiet) process.stdout.write(`services file changed: ${changes.join(" ")}\n`)
    })
  }
  if (options.server.autoOpenBrowser) {
    const { default: open } = await import("open")
    open(`${running.url}/docs`).catch((e: unknown) => process.stderr.write(`mcp-store: cannot open a browser: ${String(e)}\n`))
  }
  return new Promise<number>((resolve) => {
    const stop = (signal: NodeJS.Signals) => {
      process.off("SIGINT", handler)
      process.off("SIGTERM", handler)
      if (!quiet) process.stdout.write(`${signal}: shutting down\n`)
      running.close().then(
        () => resolve(0),
        (e: unknown) => {
          process.stderr.write(`mcp-store: shutdown failed: ${String(e)}\n`)
          resolve(1)
        }
      )
    }
    onSignal = stop
    if (requested !== undefined) stop(requested)
  })
}
