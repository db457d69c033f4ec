/**
 * The `mcp-store` program: parse the command line, start the server, print the banner, apply hand
 * edits of the services file with --reload, open the docs with --open, and shut down cleanly on
 * SIGINT/SIGTERM (every child process ended before exit). Everything it says after the options are
 * read goes through the one logger (src/logging/log.ts), in `--log-format`; a bad option is a plain
 * `mcp-store: ...` line (the format is not known yet) and exit code 2.
 */
import { CommandLineExit, parseCommandLine } from "./cli/command-line.js"
import { runImport } from "./cli/import-command.js"
import { runKeys } from "./cli/keys-command.js"
import { OptionsError, type Options } from "./config/options.js"
import { ServicesFileError } from "./config/services-file.js"
import { isLoopback, isWildcard } from "./http/request-guard.js"
import { startServer, type RunningServer } from "./http/server.js"
import { configureLogging, log, loggingSettings } from "./logging/log.js"
import { installProcessGuard } from "./runtime/process-guard.js"
import { VERSION } from "./version.js"

/** Who may add local (command) services, as the banner says it. */
const localServicesLine = (server: Options["server"]): string => {
  if (!server.localServices) return "off (--no-local-services)"
  if (server.apiKey !== undefined) return "on, for callers with the API key"
  if (server.authIssuer !== undefined) return "on, for admins (an admin key or access token)"
  if (isLoopback(server.host)) return "on (loopback clients only: the store listens on loopback)"
  if (server.allowRemoteLocalServices) return "on for every client (--allow-remote-local-services, no API key)"
  return "loopback clients only (no API key; set --api-key or --allow-remote-local-services)"
}

/**
 * The start-up information: in text format one line per item, in JSON format one line whose fields
 * hold every item (a log reader finds the URLs without parsing prose).
 */
const logBanner = (options: Options, running: RunningServer): void => {
  const services = running.store.allServiceActors().length
  const server = options.server
  const extraHosts = server.allowedHosts.length > 0 ? `, ${server.allowedHosts.join(", ")}` : ""
  const listening = `http://${server.host.includes(":") ? `[${server.host}]` : server.host}:${running.port}`
  const items: ReadonlyArray<readonly [key: string, label: string, value: string]> = [
    ["services_file", "services file  ", `${options.store.mcpConfigFile} (${services} service${services === 1 ? "" : "s"})`],
    ["docs", "API docs       ", `${running.url}/docs`],
    ["ui", "dashboard      ", `${running.url}/ui`],
    ["mcp", "MCP endpoint   ", `${running.url}/mcp (an agent's: ${running.url}/for_agent/{agent_id}/mcp)`],
    ["mcp_sse", "MCP over SSE   ", `${running.url}/sse, for old clients (an agent's: ${running.url}/for_agent/{agent_id}/sse)`],
    ["metrics", "metrics        ", `${running.url}/metrics`],
    ["reload", "reload         ", server.reload ? "on: hand edits of the services file are applied" : "off"],
    ...(running.cluster === undefined
      ? []
      : [["cluster", "cluster        ", `${running.cluster.options.name}: replica ${running.cluster.replicaId}, reached at ${running.cluster.advertiseUrl}`] as const]),
    ["local_services", "local services ", localServicesLine(server)],
    ...(running.authServer === undefined
      ? []
      : [["auth_server", "OAuth server   ", `${running.authServer.issuer}/.well-known/oauth-authorization-server (client metadata documents${server.authDynamicRegistration === false ? "" : ", dynamic registration"})`] as const]),
    [
      "allowed_hosts",
      "allowed hosts  ",
      `localhost, 127.0.0.1, [::1]${isWildcard(server.host) ? ", this machine's addresses" : isLoopback(server.host) ? "" : `, ${server.host}`}${extraHosts}`
    ],
    ...(server.allowedOrigins.length > 0 ? [["allowed_origins", "allowed origins", server.allowedOrigins.join(", ")] as const] : []),
    ...(server.authIssuer === undefined
      ? []
      : [["auth_issuer", "OAuth tokens   ", `of ${server.authIssuer}, for ${server.publicUrl ?? running.url} (metadata: /.well-known/oauth-protected-resource)`] as const])
  ]
  const headline = `mcp-store ${VERSION} listening on ${listening}`
  if (loggingSettings().format === "json") {
    log.info(headline, {
      event: "started",
      version: VERSION,
      url: listening,
      services,
      ...Object.fromEntries(items.map(([key, , value]) => [key, value])),
      docs: `${running.url}/docs`,
      mcp: `${running.url}/mcp`
    })
    return
  }
  log.info(headline)
  for (const [, label, value] of items) log.info(`  ${label}${value}`)
}

/** Warnings about settings that open the store wider than its defaults. */
const exposureWarnings = (server: Options["server"], port: number, keyed: boolean): ReadonlyArray<string> => {
  const out: string[] = []
  // `keyed`: an admin key or a key in the keys file: no request gets through without one.
  if (!keyed && !isLoopback(server.host)) {
    out.push(
      server.allowRemoteLocalServices && server.localServices
        ? `listening on ${server.host} without an API key and with --allow-remote-local-services: anyone who reaches port ${port} ` +
            `can run commands on this machine through add_service. Set --api-key (or MCPSTORE_API_KEY) or listen on 127.0.0.1.`
        : `listening on ${server.host} without an API key: anyone who reaches port ${port} can use and change the store's services ` +
            `(local command services are refused from non-loopback clients). Set --api-key (or MCPSTORE_API_KEY), or listen on 127.0.0.1.`
    )
  }
  if (server.authServer === true && !keyed) {
    out.push("--auth-server without an API key: anyone who reaches the store can approve OAuth clients on the consent page. Set --api-key (or MCPSTORE_API_KEY).")
  }
  if (server.allowedHosts.includes("*")) out.push("--allowed-hosts '*': any Host is accepted, so a DNS-rebinding web page can reach the store.")
  if (server.allowedOrigins.includes("*")) out.push("--allowed-origins '*': any web page the user opens can use the store.")
  return out
}

/** Runs the program; resolves with the exit code when the server has stopped (or failed to start). */
export const main = async (argv: ReadonlyArray<string>): Promise<number> => {
  // `mcp-store import <file>`: merges another client's config file into the services file, then exits.
  if (argv[0] === "import") return runImport(argv.slice(1), process.env)
  // `mcp-store keys create|list|revoke`: edits the keys file (src/cli/keys-command.ts), then exits.
  if (argv[0] === "keys") return runKeys(argv.slice(1), process.env)
  // `mcp-store auth approve-client|list-clients|revoke-client`: the built-in authorization server's clients (src/cli/oauth-clients-command.ts).
  if (argv[0] === "auth" && argv[1] !== undefined && ["approve-client", "list-clients", "revoke-client"].includes(argv[1])) {
    return (await import("./cli/oauth-clients-command.js")).runOAuthClients(argv.slice(1), process.env)
  }
  // `mcp-store auth <service>`: authorizes an OAuth upstream of a running store (src/cli/auth-command.ts).
  if (argv[0] === "auth") return (await import("./cli/auth-command.js")).runAuth(argv.slice(1), process.env)
  // `mcp-store approvals [list] | approve <id> | deny <id>`: the calls of a running store that wait for an approval (src/cli/approvals-command.ts).
  if (argv[0] === "approvals") return (await import("./cli/approvals-command.js")).runApprovals(argv.slice(1), process.env)
  // `mcp-store pins show|accept <service>`: held tools of a running store (src/cli/pins-command.ts).
  if (argv[0] === "pins") return (await import("./cli/pins-command.js")).runPins(argv.slice(1), process.env)
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
  configureLogging({ level: options.store.debug ? "debug" : options.server.logLevel, format: options.server.logFormat })
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
    log.error(`cannot start: ${message}`, { event: "start_failed" })
    return 1
  }
  if (options.server.showStartupInfo) logBanner(options, running)
  // A trusted authorization server makes every request need a key or a token, as a key does.
  for (const warning of exposureWarnings(options.server, running.port, running.keys.required || options.server.authIssuer !== undefined)) log.warn(warning, { event: "exposure" })
  // Applied and refused reloads are logged by the store (Store.watchFile).
  if (options.server.reload && running.cluster !== undefined) {
    log.warn("--reload has no effect with --redis-url: the definitions live in Redis; change them through any replica", { event: "reload_ignored" })
  } else if (options.server.reload) running.store.watchFile()
  if (options.server.autoOpenBrowser) {
    const { default: open } = await import("open")
    open(`${running.url}/docs`).catch((e: unknown) => log.warn(`cannot open a browser: ${String(e)}`))
  }
  return new Promise<number>((resolve) => {
    const stop = (signal: NodeJS.Signals) => {
      process.off("SIGINT", handler)
      process.off("SIGTERM", handler)
      const services = running.store.allServiceActors().length
      log.info(`${signal}: shutting down (${services} service${services === 1 ? "" : "s"} to stop)`, { event: "shutdown", signal, services })
      const started = performance.now()
      running.close().then(
        () => {
          log.info(`stopped in ${Math.round(performance.now() - started)} ms`, { event: "stopped" })
          resolve(0)
        },
        (e: unknown) => {
          log.error(`shutdown failed: ${String(e)}`, { event: "shutdown_failed" }, e)
          resolve(1)
        }
      )
    }
    onSignal = stop
    if (requested !== undefined) stop(requested)
  })
}
