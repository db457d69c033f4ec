/**
 * Helpers of the fault suite (test/faults) and the soak bench: fast monitoring settings, the
 * lifecycle table of shared/LIFECYCLE.md as allowed (from, to) pairs, a status recorder on a service
 * actor, process-group inspection through /proc, an MCP server over Streamable HTTP whose ping delay
 * and "hang" mode change at run time, a TCP server that accepts and never answers, mcp-store as a
 * child process (`node bin/mcp-store.js run api ...`), and an event-stream reader. Everything listens
 * on 127.0.0.1; everything started here has a stop that the tests call in afterEach/afterAll.
 */
import { spawn, type ChildProcess } from "node:child_process"
import { randomUUID } from "node:crypto"
import { readdirSync, readFileSync } from "node:fs"
import { createServer, request as httpRequest, type IncomingMessage, type Server, type ServerResponse } from "node:http"
import { createServer as createTcpServer, type AddressInfo, type Socket } from "node:net"
import { join } from "node:path"
import type { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js"
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js"
import { isInitializeRequest, PingRequestSchema } from "@modelcontextprotocol/sdk/types.js"
import type { MonitoringSettings } from "../../src/domain/settings.js"
import type { ServiceActorRef, Transition } from "../../src/machines/service.js"
import { createFixtureServer } from "../fixtures/fixture-server.js"
import { REPO_ROOT } from "../fixtures/paths.js"
import { liveGroupMembers, procStat } from "../mcp/support.js"
import { api, closedPort, type Api } from "../support/server.js"

/** The fault suite's monitoring: checks every 0.3 s, pings time out after 0.8 s, 3 attempts, then a retry a second. */
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

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))

// ---------------------------------------------------------------------------------------------
// The lifecycle table
// ---------------------------------------------------------------------------------------------

const ALL = ["initializing", "healthy", "warning", "reconnecting", "unreachable", "disconnecting", "disconnected"] as const

/** Every status change shared/LIFECYCLE.md allows with reconnection on (its table, row by row). */
export const ALLOWED_TRANSITIONS: ReadonlySet<string> = new Set([
  "null>initializing",
  "initializing>healthy",
  "initializing>reconnecting",
  "healthy>warning",
  "healthy>reconnecting",
  "warning>healthy",
  "warning>reconnecting",
  "reconnecting>healthy",
  "reconnecting>unreachable",
  "unreachable>healthy",
  // any but disconnecting/disconnected -> disconnecting; then disconnected
  ...ALL.filter((s) => s !== "disconnecting" && s !== "disconnected").map((s) => `${s}>disconnecting`),
  "disconnecting>disconnected",
  // restart or a changed definition: from any status to initializing
  ...ALL.filter((s) => s !== "initializing").map((s) => `${s}>initializing`)
])

/** The recorded changes that the lifecycle table does not allow, as "from>to" strings. */
export const illegalTransitions = (transitions: ReadonlyArray<Pick<Transition, "from" | "to">>): string[] =>
  transitions.map((t) => `${t.from}>${t.to}`).filter((pair) => !ALLOWED_TRANSITIONS.has(pair))

/** Every status change of a service actor from now on (an actor subscription: nothing is missed). */
export interface StatusLog {
  /** Recorded transitions (from the actor's context, each seen once), oldest first. */
  readonly transitions: Transition[]
  /** The statuses entered, in order. */
  statuses(): string[]
  /** Resolves when `status` is entered after the transition index `from` (default: any recorded), or false after `ms`. */
  waitFor(status: string, ms: number, from?: number): Promise<boolean>
  stop(): void
}

/** Records from now on; with `fromStart`, the transitions the actor already has (its last 20) come first. */
export const recordStatuses = (actor: ServiceActorRef, options: { readonly fromStart?: boolean } = {}): StatusLog => {
  const existing = actor.getSnapshot().context.transitions
  const transitions: Transition[] = options.fromStart === true ? [...existing] : []
  const seen = new Set<Transition>(existing)
  const waiters = new Set<() => void>()
  const sub = actor.subscribe((snapshot) => {
    for (const t of snapshot.context.transitions) {
      if (seen.has(t)) continue
      seen.add(t)
      transitions.push(t)
    }
    for (const wake of [...waiters]) wake()
  })
  return {
    transitions,
    statuses: () => transitions.map((t) => t.to),
    waitFor: (status, ms, from = 0) =>
      new Promise<boolean>((resolve) => {
        const check = () => transitions.slice(from).some((t) => t.to === status)
        if (check()) return resolve(true)
        const wake = () => {
          if (!check()) return
          clearTimeout(timer)
          waiters.delete(wake)
          resolve(true)
        }
        const timer = setTimeout(() => {
          waiters.delete(wake)
          resolve(false)
        }, ms)
        waiters.add(wake)
      }),
    stop: () => {
      sub.unsubscribe()
      waiters.clear()
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Processes
// ---------------------------------------------------------------------------------------------

export { liveGroupMembers }

/** Whether a process runs (exists and is not a zombie). */
export const processRunning = (pid: number): boolean => {
  const stat = procStat(pid)
  return stat !== undefined && stat.state !== "Z"
}

/** The process group of a process, or undefined when it is gone. */
export const processGroupOf = (pid: number): number | undefined => procStat(pid)?.pgrp

/** Live direct children of a process (from /proc/<pid>/task/<tid>/children). */
export const childrenOf = (pid: number): number[] => {
  const out: number[] = []
  try {
    for (const tid of readdirSync(`/proc/${pid}/task`)) {
      const text = readFileSync(`/proc/${pid}/task/${tid}/children`, "utf8").trim()
      if (text !== "") for (const p of text.split(" ")) if (processRunning(Number(p))) out.push(Number(p))
    }
  } catch {
    // gone
  }
  return out
}

/** Resident set size of a process in bytes (VmRSS), or undefined when it is gone. */
export const rssOf = (pid: number): number | undefined => {
  try {
    const m = /^VmRSS:\s+(\d+) kB$/m.exec(readFileSync(`/proc/${pid}/status`, "utf8"))
    return m ? Number(m[1]) * 1024 : undefined
  } catch {
    return undefined
  }
}

/** Polls until `check` holds or `ms` passes; resolves with the last outcome. */
export const until = async (check: () => boolean | Promise<boolean>, ms: number, every = 20): Promise<boolean> => {
  const end = Date.now() + ms
  for (;;) {
    if (await check()) return true
    if (Date.now() > end) return false
    await sleep(every)
  }
}

/** SIGKILL to every live member of a group (cleanup of a test that failed half-way). */
export const killGroup = (pgid: number): void => {
  for (const pid of liveGroupMembers(pgid)) {
    try {
      process.kill(pid, "SIGKILL")
    } catch {
      // gone meanwhile
    }
  }
}

// ---------------------------------------------------------------------------------------------
// An MCP server over Streamable HTTP whose behaviour changes at run time
// ---------------------------------------------------------------------------------------------

/** A running tunable server. */
export interface TunableServer {
  readonly url: string
  readonly port: number
  /** Every ping is answered after this many ms (0: at once). */
  pingDelayMs: number
  /** While true, every HTTP request (new or on a kept-alive socket) is read and never answered. */
  hang: boolean
  /** How many requests are being held unanswered. */
  held(): number
  /** Pings answered so far. */
  pings(): number
  stop(): Promise<void>
}

/** The fixture server (test/fixtures/fixture-server.ts) over Streamable HTTP, with a ping delay and a hang switch. */
export async function startTunableServer(): Promise<TunableServer> {
  const sessions = new Map<string, { transport: StreamableHTTPServerTransport; server: McpServer }>()
  const heldResponses = new Set<ServerResponse>()
  const sockets = new Set<Socket>()
  let pingCount = 0
  const state = { pingDelayMs: 0, hang: false }

  const reply = (res: ServerResponse, status: number, code: number, message: string) => {
    res.writeHead(status, { "content-type": "application/json" })
    res.end(JSON.stringify({ jsonrpc: "2.0", error: { code, message }, id: null }))
  }

  const handle = async (req: IncomingMessage, res: ServerResponse) => {
    if (state.hang) {
      heldResponses.add(res)
      res.on("close", () => heldResponses.delete(res))
      req.resume()
      return
    }
    let body: unknown
    if (req.method === "POST") {
      const chunks: Buffer[] = []
      for await (const c of req) chunks.push(c as Buffer)
      try {
        body = JSON.parse(Buffer.concat(chunks).toString("utf8"))
      } catch {
        return reply(res, 400, -32700, "Parse error")
      }
    }
    const sessionId = req.headers["mcp-session-id"]
    if (typeof sessionId === "string") {
      const session = sessions.get(sessionId)
      if (session === undefined) return reply(res, 404, -32001, "Session not found")
      return session.transport.handleRequest(req, res, body)
    }
    if (req.method !== "POST" || !isInitializeRequest(body)) return reply(res, 400, -32000, "Bad Request")
    const server = createFixtureServer({ name: "tunable" })
    server.server.setRequestHandler(PingRequestSchema, async (_r, extra) => {
      const ms = state.pingDelayMs
      if (ms > 0) {
        await new Promise<void>((resolve) => {
          const t = setTimeout(resolve, ms)
          extra.signal.addEventListener("abort", () => (clearTimeout(t), resolve()), { once: true })
        })
      }
      pingCount += 1
      return {}
    })
    const transport: StreamableHTTPServerTransport = new StreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      onsessioninitialized: (id) => void sessions.set(id, { transport, server }),
      onsessionclosed: (id) => void sessions.delete(id)
    })
    await server.connect(transport)
    await transport.handleRequest(req, res, body)
  }

  const http: Server = createServer((req, res) => {
    handle(req, res).catch(() => {
      if (!res.headersSent) reply(res, 500, -32603, "Internal error")
      else res.destroy()
    })
  })
  http.on("connection", (s: Socket) => {
    sockets.add(s)
    s.once("close", () => sockets.delete(s))
  })
  await new Promise<void>((resolve) => http.listen(0, "127.0.0.1", resolve))
  const port = (http.address() as AddressInfo).port
  return {
    url: `http://127.0.0.1:${port}/mcp`,
    port,
    get pingDelayMs() {
      return state.pingDelayMs
    },
    set pingDelayMs(ms: number) {
      state.pingDelayMs = ms
    },
    get hang() {
      return state.hang
    },
    set hang(on: boolean) {
      state.hang = on
    },
    held: () => heldResponses.size,
    pings: () => pingCount,
    stop: async () => {
      state.hang = false
      await Promise.all([...sessions.values()].map((s) => s.server.close().catch(() => {})))
      sessions.clear()
      for (const s of sockets) s.destroy()
      await new Promise<void>((resolve) => http.close(() => resolve()))
    }
  }
}

/** A TCP server on 127.0.0.1 that accepts every connection, reads, and never writes a byte. */
export interface SilentTcpServer {
  readonly url: string
  readonly port: number
  /** Connections accepted so far. */
  accepted(): number
  stop(): Promise<void>
}

export async function startSilentTcpServer(): Promise<SilentTcpServer> {
  const sockets = new Set<Socket>()
  let accepted = 0
  const server = createTcpServer((socket) => {
    accepted += 1
    sockets.add(socket)
    socket.on("data", () => {})
    socket.on("error", () => {})
    socket.once("close", () => sockets.delete(socket))
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  const port = (server.address() as AddressInfo).port
  return {
    url: `http://127.0.0.1:${port}/mcp`,
    port,
    accepted: () => accepted,
    stop: async () => {
      for (const s of sockets) s.destroy()
      await new Promise<void>((resolve) => server.close(() => resolve()))
    }
  }
}

// ---------------------------------------------------------------------------------------------
// mcp-store as a child process
// ---------------------------------------------------------------------------------------------

/** A running `mcp-store run api` child. */
export interface StoreProcess extends Api {
  readonly child: ChildProcess
  readonly pid: number
  readonly url: string
  readonly port: number
  /** Resolves with how the process ended. */
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null; at: number }>
  /** What it wrote to stdout and stderr so far. */
  output(): string
  /** SIGKILL if still running (cleanup), and waits for the exit. */
  kill(): Promise<void>
}

export interface StoreProcessOptions {
  readonly configFile: string
  readonly monitoring?: Partial<MonitoringSettings>
  readonly extraArgs?: ReadonlyArray<string>
  /** Node options, before the script (e.g. `--expose-gc`). */
  readonly nodeArgs?: ReadonlyArray<string>
  /** How long to wait for GET /health to answer 200 (ms, default 30 s). */
  readonly startTimeoutMs?: number
}

/** Starts `node bin/mcp-store.js run api --host 127.0.0.1 --port <free> --config <file> --no-startup-info`; resolves once /health answers 200. */
export async function spawnStore(options: StoreProcessOptions): Promise<StoreProcess> {
  const port = await closedPort()
  const args = [
    ...(options.nodeArgs ?? []),
    join(REPO_ROOT, "bin", "mcp-store.js"),
    "run",
    "api",
    "--host",
    "127.0.0.1",
    "--port",
    String(port),
    "--config",
    options.configFile,
    "--no-startup-info",
    "--log-level",
    "error",
    ...(options.monitoring !== undefined ? ["--monitoring", JSON.stringify(options.monitoring)] : []),
    ...(options.extraArgs ?? [])
  ]
  const child = spawn(process.execPath, args, { cwd: REPO_ROOT, stdio: ["ignore", "pipe", "pipe"] })
  let output = ""
  child.stdout?.on("data", (c: Buffer) => (output += c.toString("utf8")))
  child.stderr?.on("data", (c: Buffer) => (output += c.toString("utf8")))
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null; at: number }>((resolve) =>
    child.once("exit", (code, signal) => resolve({ code, signal, at: performance.now() }))
  )
  let running = true
  void exited.then(() => (running = false))
  const url = `http://127.0.0.1:${port}`
  const kill = async () => {
    if (running) child.kill("SIGKILL")
    await exited
  }
  const deadline = Date.now() + (options.startTimeoutMs ?? 30_000)
  for (;;) {
    if (!running) throw new Error(`mcp-store exited during start:\n${output}`)
    const ok = await fetch(`${url}/health`, { signal: AbortSignal.timeout(1_000) }).then(
      (r) => r.status === 200,
      () => false
    )
    if (ok) break
    if (Date.now() > deadline) {
      await kill()
      throw new Error(`mcp-store did not answer /health within the start time-out:\n${output}`)
    }
    await sleep(50)
  }
  return { ...api(url), child, pid: child.pid as number, url, port, exited, output: () => output, kill }
}

// ---------------------------------------------------------------------------------------------
// Event stream and raw requests
// ---------------------------------------------------------------------------------------------

/** An open `GET /events` stream. */
export interface EventStream {
  /** The `event:` names received so far. */
  readonly events: string[]
  /** Resolves once the response headers arrived (status). */
  readonly opened: Promise<number>
  /** Resolves when the server ended the stream (or the socket closed). */
  readonly ended: Promise<void>
  close(): void
}

export const openEventStream = (url: string): EventStream => {
  const events: string[] = []
  let resolveOpened: (n: number) => void = () => {}
  let resolveEnded: () => void = () => {}
  const opened = new Promise<number>((r) => (resolveOpened = r))
  const ended = new Promise<void>((r) => (resolveEnded = r))
  const req = httpRequest(url, { method: "GET", headers: { accept: "text/event-stream" } }, (res) => {
    resolveOpened(res.statusCode ?? 0)
    let buffer = ""
    res.on("data", (c: Buffer) => {
      buffer += c.toString("utf8")
      for (const m of buffer.matchAll(/^event: (.+)$/gm)) events.push(m[1]!)
      buffer = buffer.slice(buffer.lastIndexOf("\n") + 1)
    })
    res.on("end", resolveEnded)
    res.on("close", resolveEnded)
    res.on("error", resolveEnded)
  })
  req.on("error", () => {
    resolveOpened(0)
    resolveEnded()
  })
  req.end()
  return { events, opened, ended, close: () => req.destroy() }
}

/** A request that stays open (a long wait_service): resolves with the status, or 0 when the connection was cut. */
export const openRequest = (url: string, body: unknown): { done: Promise<{ status: number; text: string }>; close(): void } => {
  const text = JSON.stringify(body)
  let req: ReturnType<typeof httpRequest> | undefined
  const done = new Promise<{ status: number; text: string }>((resolve) => {
    req = httpRequest(url, { method: "POST", headers: { "content-type": "application/json", "content-length": Buffer.byteLength(text) } }, (res) => {
      const chunks: Buffer[] = []
      res.on("data", (c: Buffer) => chunks.push(c))
      res.on("end", () => resolve({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString("utf8") }))
      res.on("error", () => resolve({ status: 0, text: "" }))
      res.on("close", () => resolve({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString("utf8") }))
    })
    req.on("error", () => resolve({ status: 0, text: "" }))
    req.end(text)
  })
  return { done, close: () => req?.destroy() }
}
