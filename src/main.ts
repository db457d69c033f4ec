/**
 * The `mcp-store` program: parse the command line, start the server, print the banner, apply hand
 * edits of the services file with --reload, open the docs with --open, and shut down cleanly on
 * SIGINT/SIGTERM (every child process ended before exit).
 */
import { CommandLineExit, parseCommandLine } from "./config/cli.js"
import { OptionsError, type Options } from "./config/options.js"
import { ServicesFileError } from "./config/services-file.js"
import { isLoopback, isWildcard } from "./http/request-guard.js"
import { startServer, type RunningServer } from "./http/server.js"
import { installProcessGuard } from "./runtime/process-guard.js"
import { VERSION } from "./version.js"

/** Who may add local (command) services, as the banner says it. */
const localServicesLine = (server: Options["server"]): string => {
  if (!server.localServices) return "off (--no-local-services)"
  if (server.apiKey !== undefined) return "on, for callers with the API key"
  if (isLoopback(server.host)) return "on (loopback clients only: the store listens on loopback)"
  if (server.allowRemoteLocalServices) return "on for every client (--allow-remote-local-services, no API key)"
  return "loopback clients only (no API key; set --api-key or --allow-remote-local-services)"
}

const banner = (options: Options, running: RunningServer): string => {
  const services = running.store.allServiceActors().length
  const server = options.server
  const extraHosts = server.allowedHosts.length > 0 ? `, ${server.allowedHosts.join(", ")}` : ""
  const lines = [
    `mcp-store ${VERSION}`,
    `  listening on   http://${server.host.includes(":") ? `[${server.host}]` : server.host}:${running.port}`,
    `  services file  ${options.store.mcpConfigFile} (${services} service${services === 1 ? "" : "s"})`,
    `  API docs       ${running.url}/docs`,
    `  reload         ${server.reload ? "on: hand edits of the services file are applied" : "off"}`,
    `  local services ${localServicesLine(server)}`,
    `  allowed hosts  localhost, 127.0.0.1, [::1]${isWildcard(server.host) ? ", this machine's addresses" : isLoopback(server.host) ? "" : `, ${server.host}`}${extraHosts}`
  ]
  if (server.allowedOrigins.length > 0) lines.push(`  allowed origins ${server.allowedOrigins.join(", ")}`)
  return lines.join("\n")
}

/** Warnings about settings that open the store wider than its defaults. */
const exposureWarnings = (server: Options["server"], port: number): ReadonlyArray<string> => {
  const out: string[] = []
  if (server.apiKey === undefined && !isLoopback(server.host)) {
    out.push(
      server.allowRemoteLocalServices && server.localServices
        ? `listening on ${server.host} without an API key and with --allow-remote-local-services: anyone who reaches port ${port} ` +
            `can run commands on this machine through add_service. Set --api-key (or MCPSTORE_API_KEY) or listen on 127.0.0.1.`
        : `listening on ${server.host} without an API key: anyone who reaches port ${port} can use and change the store's services ` +
            `(local command services are refused from non-loopback clients). Set --api-key (or MCPSTORE_API_KEY), or listen on 127.0.0.1.`
    )
  }
  if (server.allowedHosts.includes("*")) out.push("--allowed-hosts '*': any Host is accepted, so a DNS-rebinding web page can reach the store.")
  if (server.allowedOrigins.includes("*")) out.push("--allowed-origins '*': any web page the user opens can use the store.")
  return out
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
  installProcessGuard() // a service's uncaught error is logged, not fatal
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
  for (const warning of exposureWarnings(options.server, running.port)) process.stderr.write(`mcp-store: WARNING: ${warning}\n`)
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
