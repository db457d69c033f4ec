/**
 * Child processes of the benchmark: the store (`node dist/mcp-store.mjs run api`, what `npm start`
 * runs; `buildStore()` makes it from the sources first), the peer `mcp-hub`, and
 * the fixture-server processes (bench/fixtures.ts), all on 127.0.0.1. Every child is started in its
 * own process group and tracked, so `stopAll()` (called at the end, on error and on SIGINT) ends
 * exactly the processes this benchmark started: SIGTERM first (the store and mcp-hub then end their
 * own MCP server processes), SIGKILL to the group after a grace period. Also: free ports, and the
 * resident memory and CPU time of a process read from /proc.
 */
import { execFileSync, spawn, type ChildProcess } from "node:child_process"
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { request as httpRequest, type ClientRequest } from "node:http"
import { createServer } from "node:net"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { fileURLToPath, pathToFileURL } from "node:url"
import { createRequire } from "node:module"

const require = createRequire(import.meta.url)

/** The repository root. */
export const ROOT = fileURLToPath(new URL("..", import.meta.url))
/** `--import <tsx>` as an absolute URL, so it works from any working directory. */
export const TSX_IMPORT = ["--import", pathToFileURL(require.resolve("tsx")).href]
export const STDIO_FIXTURE = join(ROOT, "test", "fixtures", "stdio-fixture.ts")
/** The stdio fixture server as a command line (what every manager starts). */
export const stdioFixtureLaunch = { command: process.execPath, args: [...TSX_IMPORT, STDIO_FIXTURE] }

/** The store as `npm start` runs it: the esbuild bundle of the sources (scripts/build.mjs). */
export const STORE_SCRIPT = join(ROOT, "dist", "mcp-store.mjs")
/** The store run from its TypeScript sources through tsx (development, `npm run dev`, tests). */
export const SOURCES_SCRIPT = join(ROOT, "scripts", "dev.mjs")

/** Builds dist/mcp-store.mjs from the current sources (`npm run build`); resolves with the build time in ms. */
export const buildStore = (): number => {
  const started = performance.now()
  execFileSync(process.execPath, [join(ROOT, "scripts", "build.mjs")], { cwd: ROOT, stdio: ["ignore", "ignore", "inherit"] })
  return performance.now() - started
}

const CLK_TCK = 100 // getconf CLK_TCK on Linux

/** A child the benchmark started. */
export interface Child {
  readonly name: string
  readonly proc: ChildProcess
  readonly pid: number
  /** performance.now() just before spawn. */
  readonly spawnedAt: number
  /** The last lines of its stderr (and stdout when not consumed), for error messages. */
  tail(): string
  /** Resolves when it has exited. */
  readonly exited: Promise<number | null>
}

const children = new Set<Child>()

/** Spawns a tracked child in its own process group; stdout is piped when `stdout: "pipe"`. */
export const spawnChild = (
  name: string,
  command: string,
  args: ReadonlyArray<string>,
  options: { cwd?: string; env?: Record<string, string | undefined>; stdout?: "pipe" | "ignore"; stdin?: "pipe" | "ignore" } = {}
): Child => {
  const spawnedAt = performance.now()
  const proc = spawn(command, [...args], {
    cwd: options.cwd ?? ROOT,
    env: { ...process.env, ...options.env },
    stdio: [options.stdin ?? "ignore", options.stdout ?? "ignore", "pipe"],
    detached: true
  })
  if (proc.pid === undefined) throw new Error(`cannot start ${name}`)
  const lines: string[] = []
  proc.stderr?.setEncoding("utf8")
  proc.stderr?.on("data", (chunk: string) => {
    lines.push(...chunk.split("\n").filter((l) => l.length > 0))
    if (lines.length > 40) lines.splice(0, lines.length - 40)
  })
  const exited = new Promise<number | null>((resolve) => proc.once("exit", (code) => resolve(code)))
  const child: Child = { name, proc, pid: proc.pid, spawnedAt, tail: () => lines.join("\n"), exited }
  children.add(child)
  void exited.then(() => children.delete(child))
  return child
}

/** Ends one child: SIGTERM, then SIGKILL to its whole process group after `graceMs`. */
export const stopChild = async (child: Child, graceMs = 5_000): Promise<void> => {
  if (child.proc.exitCode !== null || child.proc.signalCode !== null) {
    killGroup(child.pid, "SIGKILL") // anything it left in its group
    return
  }
  try {
    process.kill(child.pid, "SIGTERM")
  } catch {
    return
  }
  let timer: NodeJS.Timeout | undefined
  const killed = await Promise.race([
    child.exited.then(() => false),
    new Promise<boolean>((r) => (timer = setTimeout(() => r(true), graceMs)))
  ])
  clearTimeout(timer)
  if (killed) process.stderr.write(`bench: ${child.name} (pid ${child.pid}) did not stop within ${graceMs} ms: SIGKILL\n`)
  killGroup(child.pid, "SIGKILL")
  await child.exited
}

const killGroup = (pid: number, signal: NodeJS.Signals) => {
  try {
    process.kill(-pid, signal)
  } catch {
    // the group is gone
  }
}

const cleanups = new Set<() => Promise<void> | void>()

/** Registers something to release in `stopAll` (e.g. an MCP client that owns a server process); returns the unregister function. */
export const onCleanup = (release: () => Promise<void> | void): (() => void) => {
  cleanups.add(release)
  return () => cleanups.delete(release)
}

/** The temporary folders of `workFolder`: removed by `stopAll` (and `killAllNow`) once the processes using them ended. */
const folders = new Set<string>()

/** A fresh temporary folder (services files, records of the stores a benchmark starts), removed at its end. */
export const workFolder = (prefix: string): string => {
  const dir = mkdtempSync(join(tmpdir(), prefix))
  folders.add(dir)
  return dir
}

const removeFolders = (): void => {
  for (const dir of folders) rmSync(dir, { recursive: true, force: true, maxRetries: 3 })
  folders.clear()
}

/** Releases every registered resource, then ends every child still running (in parallel), then removes the work folders. */
export const stopAll = async (): Promise<void> => {
  const pending = [...cleanups]
  cleanups.clear()
  await Promise.all(pending.map(async (release) => { try { await release() } catch { /* best effort */ } }))
  await Promise.all([...children].map((c) => stopChild(c)))
  removeFolders()
}

/** Last resort when the process is exiting synchronously: SIGKILL every tracked group. */
export const killAllNow = (): void => {
  for (const c of children) killGroup(c.pid, "SIGKILL")
  for (const pid of extraPids) {
    try {
      process.kill(pid, "SIGKILL")
    } catch {
      // gone
    }
  }
  removeFolders()
}

const extraPids = new Set<number>()
/** A process started by a library (e.g. the SDK's stdio client), to SIGKILL if we exit abruptly. */
export const trackPid = (pid: number): void => void extraPids.add(pid)

/**
 * A free TCP port on 127.0.0.1 below the ephemeral range (32768 and up on Linux). A port from the
 * ephemeral range is a trap for readiness polling: connecting again and again to a port nobody
 * listens on yet can make the kernel pick that same port as the source port, and the socket then
 * connects to itself (TCP simultaneous open), hangs, and keeps the server from binding the port.
 */
export const freePort = async (): Promise<number> => {
  for (let attempt = 0; attempt < 200; attempt++) {
    const port = 20_000 + Math.floor(Math.random() * 12_000)
    const free = await new Promise<boolean>((resolve) => {
      const srv = createServer()
      srv.once("error", () => resolve(false))
      srv.listen(port, "127.0.0.1", () => srv.close(() => resolve(true)))
    })
    if (free && !usedPorts.has(port)) {
      usedPorts.add(port)
      return port
    }
  }
  throw new Error("no free port between 20000 and 32000")
}
const usedPorts = new Set<number>()

/** Resident set size (VmRSS) and its peak (VmHWM) in MB, from /proc/<pid>/status. */
export const memoryMb = (pid: number): { rss: number; peak: number } => {
  const status = readFileSync(`/proc/${pid}/status`, "utf8")
  const kb = (key: string) => Number(new RegExp(`^${key}:\\s+(\\d+) kB`, "m").exec(status)?.[1] ?? NaN)
  return { rss: kb("VmRSS") / 1024, peak: kb("VmHWM") / 1024 }
}

/** CPU time (user + system) of a process in seconds, from /proc/<pid>/stat. */
export const cpuSeconds = (pid: number): number => {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8")
  // Fields after the command name (which is in parentheses and may contain spaces).
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ")
  return (Number(fields[11]) + Number(fields[12])) / CLK_TCK // utime, stime (fields 14 and 15)
}

/** Polls `probe` every `everyMs` until it resolves true; rejects after `timeoutMs`. */
export const until = async (
  what: string,
  probe: () => Promise<boolean>,
  timeoutMs: number,
  everyMs = 5,
  fatal: () => Error | undefined = () => undefined
): Promise<void> => {
  const deadline = performance.now() + timeoutMs
  for (;;) {
    if (await probe().catch(() => false)) return
    const error = fatal()
    if (error) throw error
    if (performance.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`)
    await new Promise((r) => setTimeout(r, everyMs))
  }
}

// ---------------------------------------------------------------------------------------------
// The fixture servers

/** A bench/fixtures.ts process and the URLs of its Streamable HTTP fixtures. */
export interface FixtureProcess {
  readonly child: Child
  readonly urls: ReadonlyArray<string>
}

/** Starts a bench/fixtures.ts process with `count` HTTP fixtures (more of its flags in `args`) and reads their URLs. */
export const startFixtures = async (count: number, name = "fixtures", args: ReadonlyArray<string> = []): Promise<FixtureProcess> => {
  const child = spawnChild(name, process.execPath, [...TSX_IMPORT, join(ROOT, "bench", "fixtures.ts"), "--count", String(count), ...args], {
    stdout: "pipe",
    stdin: "pipe"
  })
  const line = await new Promise<string>((resolve, reject) => {
    let buffer = ""
    const timer = setTimeout(() => reject(new Error(`${name}: no URLs within 30 s\n${child.tail()}`)), 30_000)
    child.proc.stdout?.setEncoding("utf8")
    child.proc.stdout?.on("data", (chunk: string) => {
      buffer += chunk
      const nl = buffer.indexOf("\n")
      if (nl >= 0) {
        clearTimeout(timer)
        resolve(buffer.slice(0, nl))
      }
    })
    void child.exited.then((code) => reject(new Error(`${name} exited (${code})\n${child.tail()}`)))
  })
  return { child, urls: (JSON.parse(line) as { urls: string[] }).urls }
}

/**
 * Resolves with performance.now() when the first GET `path` on 127.0.0.1:`port` is answered 200,
 * and when the first connection was accepted (the port open).
 * A new probe (its own connection) starts every `everyMs` while earlier ones are still pending, and
 * none is given up early: a server may accept connections before it can answer them (the store's
 * port is open while its app is still being built, and a request that arrives then is never
 * answered), so one probe stuck in that gap must not hide the answers to the later ones.
 */
export const firstAnswer = (
  port: number,
  path: string,
  timeoutMs: number,
  fatal: () => Error | undefined = () => undefined,
  everyMs = 10
): Promise<{ readonly answeredAt: number; readonly connectedAt: number }> =>
  new Promise((resolve, reject) => {
    const pending = new Set<ClientRequest>()
    let done = false
    let connectedAt = Number.NaN
    const finish = (error: Error | undefined, at = 0) => {
      if (done) return
      done = true
      clearInterval(timer)
      for (const r of pending) r.destroy()
      pending.clear()
      if (error) reject(error)
      else resolve({ answeredAt: at, connectedAt })
    }
    const deadline = performance.now() + timeoutMs
    const probe = () => {
      const error = fatal()
      if (error) return finish(error)
      if (performance.now() > deadline) return finish(new Error(`no answer on port ${port} within ${timeoutMs} ms`))
      if (pending.size >= 300) return
      const req = httpRequest({ host: "127.0.0.1", port, path, agent: false }, (res) => {
        const at = performance.now()
        res.resume()
        pending.delete(req)
        if (res.statusCode === 200) finish(undefined, at)
      })
      req.on("error", () => pending.delete(req))
      req.on("socket", (socket) => socket.once("connect", () => (connectedAt = Number.isNaN(connectedAt) ? performance.now() : connectedAt)))
      pending.add(req)
      req.end()
    }
    const timer = setInterval(probe, everyMs)
    probe()
  })

// ---------------------------------------------------------------------------------------------
// The store

export interface StoreProcess {
  readonly child: Child
  readonly url: string
  readonly configFile: string
}

/**
 * Starts the store as `node dist/mcp-store.mjs run api` on 127.0.0.1 with the given services file,
 * and waits for its first answered request (GET /health). `nodeArgs` go before the script (e.g.
 * `--cpu-prof`); `script` replaces the bundle (SOURCES_SCRIPT: the sources through tsx); `args` are
 * more options of `run api` (e.g. `--max-mcp-sessions 100`); `env` is added to the benchmark's environment
 * (e.g. MCPSTORE_SECRET_KEY, which replica mode requires). Resolves with the time from spawn to that first answer, and to the port being open.
 */
export const startStore = async (
  configFile: string,
  options: {
    nodeArgs?: ReadonlyArray<string>
    args?: ReadonlyArray<string>
    monitoring?: object
    name?: string
    readyTimeoutMs?: number
    script?: string
    env?: Record<string, string | undefined>
  } = {}
): Promise<StoreProcess & { readonly startMs: number; readonly portOpenMs: number }> => {
  const port = await freePort()
  const args = [
    ...(options.nodeArgs ?? []),
    options.script ?? STORE_SCRIPT,
    "run",
    "api",
    "--host",
    "127.0.0.1",
    "--port",
    String(port),
    "--config",
    configFile,
    "--log-level",
    "error",
    "--no-startup-info",
    ...(options.monitoring ? ["--monitoring", JSON.stringify(options.monitoring)] : []),
    ...(options.args ?? [])
  ]
  const child = spawnChild(options.name ?? "store", process.execPath, args, { cwd: ROOT, ...(options.env ? { env: options.env } : {}) })
  const url = `http://127.0.0.1:${port}`
  const { answeredAt, connectedAt } = await firstAnswer(port, "/health", options.readyTimeoutMs ?? 30_000, () =>
    child.proc.exitCode !== null || child.proc.signalCode !== null ? new Error(`store exited (${child.proc.exitCode}) before answering\n${child.tail()}`) : undefined
  )
  return { child, url, configFile, startMs: answeredAt - child.spawnedAt, portOpenMs: connectedAt - child.spawnedAt }
}

// ---------------------------------------------------------------------------------------------
// The peer: mcp-hub

/**
 * Makes every server of the process listen on 127.0.0.1: mcp-hub calls `app.listen(port)`, which
 * would listen on every interface.
 */
const LOOPBACK_PRELOAD = `data:text/javascript,${encodeURIComponent(`
import net from "node:net";
const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  if (typeof args[0] === "number") return listen.call(this, args[0], "127.0.0.1", ...args.slice(1).filter((a) => typeof a === "function"));
  return listen.apply(this, args);
};
`)}`

export interface HubProcess {
  readonly child: Child
  readonly url: string
}

/**
 * Starts mcp-hub (node_modules/mcp-hub/dist/cli.js --port --config) on 127.0.0.1 with the given
 * mcpServers, in a private HOME/XDG tree under `dir` (its logs, workspace cache and marketplace
 * cache go there). The marketplace cache is seeded as fresh, so mcp-hub does not fetch its registry
 * from the internet at start. Resolves once /api/health says `ready` and every server is connected.
 */
export const startHub = async (dir: string, mcpServers: Record<string, unknown>): Promise<HubProcess> => {
  const port = await freePort()
  const cacheDir = join(dir, "data", "mcp-hub", "cache")
  mkdirSync(cacheDir, { recursive: true })
  mkdirSync(join(dir, "home"), { recursive: true })
  writeFileSync(
    join(cacheDir, "registry.json"),
    JSON.stringify({
      registry: { version: "bench", generatedAt: Date.now(), totalServers: 1, servers: [{ id: "bench", name: "bench" }] },
      lastFetchedAt: Date.now(),
      serverDocumentation: {}
    })
  )
  const configFile = join(dir, "mcp-hub.json")
  writeFileSync(configFile, JSON.stringify({ mcpServers }, null, 2))
  const cli = join(ROOT, "node_modules", "mcp-hub", "dist", "cli.js")
  const child = spawnChild("mcp-hub", process.execPath, ["--import", LOOPBACK_PRELOAD, cli, "--port", String(port), "--config", configFile], {
    env: {
      HOME: join(dir, "home"),
      XDG_DATA_HOME: join(dir, "data"),
      XDG_STATE_HOME: join(dir, "state"),
      XDG_CONFIG_HOME: join(dir, "config")
    }
  })
  const url = `http://127.0.0.1:${port}`
  const names = Object.keys(mcpServers)
  let failed: Error | undefined
  void child.exited.then((code) => (failed = new Error(`mcp-hub exited (${code})\n${child.tail()}`)))
  await until(
    "mcp-hub ready with every server connected",
    async () => {
      const res = await fetch(`${url}/api/health`, { signal: AbortSignal.timeout(5_000) })
      const body = (await res.json()) as { state?: string; servers?: Array<{ name: string; status: string }> }
      return body.state === "ready" && names.every((n) => body.servers?.some((s) => s.name === n && s.status === "connected"))
    },
    60_000,
    50,
    () => failed
  )
  return { child, url }
}
