/**
 * Helpers for the integration tests of test/http and test/runtime: a real mcp-store server on
 * 127.0.0.1 and a free port, with its services file in a fresh temporary folder and fast monitoring
 * settings; a tiny JSON client; definitions of the fixture services; process checks.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { request as httpRequest } from "node:http"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { createServer } from "node:net"
import { resolveOptions, type OptionValues } from "../../src/config/options.js"
import type { MonitoringSettings } from "../../src/domain/settings.js"
import { startServer, type RunningServer } from "../../src/http/server.js"
import { fileURLToPath } from "node:url"
import { stdioFixture, TSX_IMPORT, type Launch } from "../fixtures/paths.js"

/** Monitoring settings that make the lifecycle observable in a test's time: checks every 0.5 s, retries every second. */
export const FAST_MONITORING: Partial<MonitoringSettings> = {
  health_check_seconds: 0.5,
  reconnection_seconds: 1,
  initialization_timeout_seconds: 15,
  ping_timeout_seconds: 2,
  disconnection_timeout_seconds: 3
}

/** A fresh temporary folder; removed by `cleanup()` of the server that uses it (or by hand). */
export const freshDir = (): string => mkdtempSync(join(tmpdir(), "mcp-store-it-"))

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
}

/** A running server with its services file and a JSON client. */
export interface TestServer extends Api {
  readonly running: RunningServer
  readonly url: string
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
  const running = await startServer({ server: resolved.server, store: resolved.store, graceMs: options.graceMs ?? 200 })
  const close = () => running.close()
  return {
    ...api(running.url),
    running,
    url: running.url,
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

/** A JSON answer: status, parsed body (or the text when it is not JSON), headers, round-trip time. */
export interface Reply<B = any> {
  readonly status: number
  readonly body: B
  readonly text: string
  readonly headers: Headers
  /** performance.now() when the whole body had arrived. */
  readonly receivedAt: number
}

export interface Api {
  get<B = any>(path: string): Promise<Reply<B>>
  post<B = any>(path: string, body?: unknown): Promise<Reply<B>>
  del<B = any>(path: string): Promise<Reply<B>>
  /** Any method, with a raw body and headers of your choice. */
  request<B = any>(method: string, path: string, init?: { body?: string; headers?: Record<string, string> }): Promise<Reply<B>>
}

/** A JSON client of a base URL (fetch; every request bounded by 40 s so a hang fails the test, not the run). */
export const api = (base: string): Api => {
  const request = async <B>(method: string, path: string, init: { body?: string; headers?: Record<string, string> } = {}) => {
    const res = await fetch(base + path, {
      method,
      ...(init.body !== undefined ? { body: init.body } : {}),
      headers: init.headers ?? {},
      signal: AbortSignal.timeout(40_000)
    })
    const text = await res.text()
    const receivedAt = performance.now()
    let body: unknown = text
    try {
      body = JSON.parse(text)
    } catch {
      // not JSON: keep the text
    }
    return { status: res.status, body: body as B, text, headers: res.headers, receivedAt }
  }
  return {
    request,
    get: (path) => request("GET", path),
    del: (path) => request("DELETE", path),
    post: (path, body) =>
      request("POST", path, body === undefined ? {} : { body: JSON.stringify(body), headers: { "content-type": "application/json" } })
  }
}

/**
 * A raw POST over node:http (for bodies the server may refuse before reading them all: fetch can
 * fail with EPIPE there). Resolves with status and body text.
 */
export const rawPost = (url: string, body: Buffer | string, headers: Record<string, string>): Promise<{ status: number; text: string }> =>
  new Promise((resolve, reject) => {
    const req = httpRequest(url, { method: "POST", headers }, (res) => {
      const chunks: Buffer[] = []
      res.on("data", (c: Buffer) => chunks.push(c))
      res.on("end", () => resolve({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString("utf8") }))
      res.on("error", reject)
    })
    req.setTimeout(20_000, () => req.destroy(new Error("rawPost timed out")))
    req.on("error", reject)
    req.end(body)
  })

/** A local definition (`command`, `args`) for a launch command. */
export const localService = (name: string, launch: Launch, extra: Record<string, unknown> = {}) => ({
  name,
  command: launch.command,
  args: [...launch.args],
  ...(launch.env !== undefined ? { env: { ...launch.env } } : {}),
  ...extra
})

/** The stdio fixture as a named definition. */
export const fixtureService = (name: string, ...flags: string[]) => localService(name, stdioFixture(...flags))

/** The strict server of strict-server.ts (upstream JSON-RPC -32602 and -32603 answers). */
export const strictServer: Launch = {
  command: process.execPath,
  args: [...TSX_IMPORT, fileURLToPath(new URL("./strict-server.ts", import.meta.url))]
}

/** Text of an MCP result's first text block. */
export const firstText = (content: ReadonlyArray<{ type: string; text?: string }>): string =>
  content.find((c) => c.type === "text")?.text ?? ""

/** A TCP port on 127.0.0.1 that nothing listens on (taken, then released). */
export const closedPort = (): Promise<number> =>
  new Promise((resolve, reject) => {
    const s = createServer()
    s.once("error", reject)
    s.listen(0, "127.0.0.1", () => {
      const address = s.address()
      const port = typeof address === "object" && address !== null ? address.port : 0
      s.close(() => resolve(port))
    })
  })

/** Process state letter from /proc (Z for a zombie), or undefined when there is no such process. */
const procState = (pid: number): string | undefined => {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8")
    return stat.slice(stat.lastIndexOf(")") + 2).split(" ")[0]
  } catch {
    return undefined
  }
}

/** True when `process.kill(pid, 0)` throws ESRCH. */
export const noSuchProcess = (pid: number): boolean => {
  try {
    process.kill(pid, 0)
    return false
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === "ESRCH"
  }
}

/**
 * Whether a process has ended: ESRCH, or a zombie (dead; this machine's init does not reap
 * orphaned grandchildren, so a killed grandchild may stay a zombie for ever).
 */
export const processGone = (pid: number): boolean => noSuchProcess(pid) || procState(pid) === "Z"

/** Polls `check` every 25 ms until it holds or `ms` passes; returns the last outcome. */
export const eventually = async (check: () => boolean | Promise<boolean>, ms: number): Promise<boolean> => {
  const end = Date.now() + ms
  for (;;) {
    if (await check()) return true
    if (Date.now() > end) return false
    await new Promise((r) => setTimeout(r, 25))
  }
}
