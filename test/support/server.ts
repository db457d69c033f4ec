/**
 * A real mcp-store server in the test's process, as most integration tests use it: on 127.0.0.1 and
 * a free port, its services file in a fresh temporary folder, monitoring settings fast enough to
 * watch the lifecycle in a test's time, and a JSON client bound to its URL.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { createServer } from "node:net"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { resolveOptions, type OptionValues, type ServerOptions } from "../../src/config/options.js"
import type { MonitoringSettings } from "../../src/domain/settings.js"
import type { RunningServer } from "../../src/http/server.js"
import { runKeys } from "../../src/cli/keys-command.js"
import { api, type Api } from "./client.js"
import type { TypedApi } from "./typed.js"

/**
 * Monitoring settings that make the lifecycle observable in a test's time: checks every 2 s, retries
 * every second. A check costs the test process a few milliseconds of CPU for each service of each
 * store alive: at 0.5 s the checks were a fifth of the forks' CPU in a run (31 CPU-seconds), while
 * the tests waited on them no more than on the retries. A test that watches checks asks for more.
 */
export const FAST_MONITORING: Partial<MonitoringSettings> = {
  health_check_seconds: 2,
  reconnection_seconds: 1,
  initialization_timeout_seconds: 15,
  ping_timeout_seconds: 2,
  disconnection_timeout_seconds: 3
}

/** The fault suite's monitoring (test/faults): checks every 0.3 s, pings time out after 0.8 s, 3 attempts, then a retry a second. */
export const FAULT_MONITORING: Partial<MonitoringSettings> = {
  health_check_seconds: 0.3,
  warning_check_seconds: 0.3,
  ping_timeout_seconds: 0.8,
  slow_response_ms: 200,
  reconnection_seconds: 1,
  initialization_timeout_seconds: 5,
  max_reconnect_attempts: 3,
  unreachable_retry_seconds: 1,
  disconnection_timeout_seconds: 3
}

/** The folders `freshDir` made in this process that may still exist: test/support/file-setup.ts removes them at each file's end. */
const FRESH_DIRS = Symbol.for("mcp-store.test.fresh-dirs")

/** A fresh temporary folder; removed by `cleanup()` of the server that uses it, and in any case at the end of the file. */
export const freshDir = (): string => {
  const dir = mkdtempSync(join(tmpdir(), "mcp-store-it-"))
  ;((globalThis as { [FRESH_DIRS]?: Set<string> })[FRESH_DIRS] ??= new Set()).add(dir)
  return dir
}

export interface TestServerOptions {
  /** The services file's content (`{mcpServers, agents}`); written before the server starts. */
  readonly services?: unknown
  /** Monitoring keys over FAST_MONITORING. */
  readonly monitoring?: Partial<MonitoringSettings>
  /** Use this folder instead of a fresh one (a restart on the same file). */
  readonly dir?: string
  /** `--api-key`. */
  readonly apiKey?: string
  /** `--no-local-services` when false. */
  readonly localServices?: boolean
  /** Shutdown grace period in ms (default 200). */
  readonly graceMs?: number
  /** Any other options by their specification names (caps such as `max_event_streams`, ...). */
  readonly options?: OptionValues
  /** The secret of sealed MCP session ids (`StartServerOptions.sessionSecret`, as a cluster passes it). */
  readonly sessionSecret?: string
  /** Server options no option name carries (a secret the command line reads from the environment). */
  readonly server?: Partial<ServerOptions>
}

/** A running server with its services file and a JSON client. */
export interface TestServer extends Api {
  readonly running: RunningServer
  readonly url: string
  /** The typed client of the contract (typed.ts), with the API key when the server has one. */
  readonly typed: TypedApi
  readonly dir: string
  readonly file: string
  /** The services file as JSON. */
  readFile(): Record<string, unknown>
  /** The services file as text (byte-exact comparisons). */
  readFileText(): string
  /** Closes the server (children ended); idempotent. */
  close(): Promise<void>
  /** Closes and removes the folder. */
  cleanup(): Promise<void>
}

/** Starts mcp-store on 127.0.0.1, port 0, startup banner off, fast monitoring. */
export const startTestServer = async (options: TestServerOptions = {}): Promise<TestServer> => {
  const dir = options.dir ?? freshDir()
  const file = join(dir, "mcp.json")
  if (options.services !== undefined) writeFileSync(file, `${JSON.stringify(options.services, null, 2)}\n`)
  const resolved = resolveOptions({
    log_level: "error",
    ...options.options,
    host: "127.0.0.1",
    port: 0,
    show_startup_info: false,
    mcp_config_file: file,
    monitoring: { ...FAST_MONITORING, ...options.monitoring },
    ...(options.apiKey !== undefined ? { api_key: options.apiKey } : {}),
    ...(options.localServices !== undefined ? { local_services: options.localServices } : {})
  })
  // Loaded here, on first use: a test that starts no server does not pay for loading it.
  const [{ startServer }, { typedApi }] = await Promise.all([import("../../src/http/server.js"), import("./typed.js")])
  const running = await startServer({
    server: { ...resolved.server, ...options.server },
    store: resolved.store,
    graceMs: options.graceMs ?? 200,
    ...(options.sessionSecret !== undefined ? { sessionSecret: options.sessionSecret } : {})
  })
  const close = () => running.close()
  // Made on first use: building the contract's client costs tens of ms of CPU, and most tests that
  // start a store never read through it.
  let typed: TypedApi | undefined
  return {
    ...api(running.url),
    running,
    url: running.url,
    get typed() {
      return (typed ??= typedApi(running.url, options.apiKey))
    },
    dir,
    file,
    readFile: () => JSON.parse(readFileSync(file, "utf8")) as Record<string, unknown>,
    readFileText: () => readFileSync(file, "utf8"),
    close,
    cleanup: async () => {
      await close()
      rmSync(dir, { recursive: true, force: true })
    }
  }
}

/**
 * Ports handed out by `closedPort`: each fork of the run (`VITEST_POOL_ID`) has its own block below
 * the kernel's ephemeral range (32768 and up on Linux), and takes its ports in turn, so a port is not
 * handed out again soon. A port the kernel picks (`listen(0)`, released) could be picked again by
 * another file at once: a store started on it found it in use, and a replica that ended left its
 * address to whatever took the port next, which then answered the other replicas in its place.
 * Each process starts at a place of its block set by its pid: two runs on one machine (their forks
 * have the same pool ids) then take different ports instead of the same ones in the same order.
 */
const FIRST_PORT = 20000
/** Blocks for up to this many forks (vitest.config.ts runs four): with more, two forks would share a block and hand out each other's ports. */
const FORK_BLOCKS = 8
const PORTS_PER_FORK = 1500
let portTurn = process.pid % PORTS_PER_FORK

/** Whether nothing listens on `port` of 127.0.0.1 now (it could be bound). */
const bindable = (port: number): Promise<boolean> =>
  new Promise((resolve) => {
    const s = createServer()
    s.once("error", () => resolve(false))
    s.listen(port, "127.0.0.1", () => s.close(() => resolve(true)))
  })

/** A TCP port on 127.0.0.1 that nothing listens on (taken, then released), from this fork's block. */
export const closedPort = async (): Promise<number> => {
  const fork = (Number(process.env["VITEST_POOL_ID"] ?? 1) - 1) % FORK_BLOCKS
  for (let tries = 0; tries < 100; tries++) {
    const port = FIRST_PORT + fork * PORTS_PER_FORK + (portTurn++ % PORTS_PER_FORK)
    if (await bindable(port)) return port
  }
  throw new Error(`no free port in the block ${FIRST_PORT + fork * PORTS_PER_FORK}-${FIRST_PORT + (fork + 1) * PORTS_PER_FORK - 1}`)
}

/**
 * The uptime, in seconds to two decimals, a store started at `startedAt` can report when it computes
 * it between `from` and `to` (Date.now() before the request and after the answer).
 */
export const uptimeRange = (startedAt: number, from: number, to: number): { readonly min: number; readonly max: number } => ({
  min: Math.floor((from - startedAt) / 10) / 100,
  max: Math.ceil((to - startedAt) / 10) / 100
})

/** Creates a key in a keys file with `mcp-store keys create` (`argv`: `--role`, `--agent`, `--name`...); its secret. */
export const createKey = async (keysFile: string, ...argv: string[]): Promise<string> => {
  let out = ""
  let err = ""
  const code = await runKeys(["create", ...argv, "--keys-file", keysFile], {}, { writeOut: (t) => void (out += t), writeErr: (t) => void (err += t) })
  if (code !== 0) throw new Error(`keys create ${argv.join(" ")}: exit ${code}: ${err}`)
  return out.trim()
}
