/**
 * Processes as tests see them through /proc: whether one is gone (a zombie counts as gone: this
 * machine's init does not reap orphans, so a killed grandchild may stay a zombie for ever), the live
 * members of a process group, children, RSS; and mcp-store itself as a child process
 * (`node <bundle of src/cli-entry.ts> run api ...`, test/support/programs.ts; outside vitest
 * `node scripts/dev.mjs run api ...`, the sources through tsx) for the tests that need a real process.
 */
import { spawn, type ChildProcess } from "node:child_process"
import { readdirSync, readFileSync } from "node:fs"
import type { MonitoringSettings } from "../../src/domain/settings.js"
import { REPO_ROOT } from "../fixtures/paths.js"
import { api, type Api } from "./client.js"
import { storeScript } from "./programs.js"
import { closedPort } from "./server.js"
import { eventually } from "./wait.js"

/** Whether a process group still has a running (non-zombie) member: the product's own check (src/mcp/stdio.ts). */
export { groupRunning } from "../../src/mcp/stdio.js"

/** The state letter and process group of a process from /proc, or undefined when there is none. */
const procStat = (pid: number): { state: string; pgrp: number } | undefined => {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8")
    // "pid (comm) S ppid pgrp ...": comm may hold spaces and parentheses.
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ")
    return { state: fields[0] ?? "", pgrp: Number(fields[2]) }
  } catch {
    return undefined
  }
}

/**
 * Whether a process has ended: `kill(pid, 0)` fails with ESRCH, or it is a zombie (dead, waiting to
 * be reaped; on machines whose init does not reap orphans, killed grandchildren stay zombies).
 */
export const processGone = (pid: number): boolean => {
  try {
    process.kill(pid, 0)
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "ESRCH"
  }
  return procStat(pid)?.state === "Z"
}

/** Live (non-zombie) processes whose process group is `pgid`, from /proc. */
export const liveGroupMembers = (pgid: number): Array<number> =>
  readdirSync("/proc")
    .filter((entry) => /^\d+$/.test(entry))
    .map(Number)
    .filter((pid) => {
      const stat = procStat(pid)
      return stat !== undefined && stat.pgrp === pgid && stat.state !== "Z"
    })

/** The process group of a process, or undefined when it is gone. */
export const processGroupOf = (pid: number): number | undefined => procStat(pid)?.pgrp

/** Live direct children of a process (from /proc/<pid>/task/<tid>/children). */
export const childrenOf = (pid: number): number[] => {
  const out: number[] = []
  try {
    for (const tid of readdirSync(`/proc/${pid}/task`)) {
      const text = readFileSync(`/proc/${pid}/task/${tid}/children`, "utf8").trim()
      if (text !== "") for (const p of text.split(" ")) if (!processGone(Number(p))) out.push(Number(p))
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
  /** SIGKILL if still running (cleanup), then SIGKILL to the process groups of its local services; waits for the exit. */
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
  /** Environment variables added to this process's. */
  readonly env?: Readonly<Record<string, string>>
}

/** Starts `node <mcp-store> run api --host 127.0.0.1 --port <free> --config <file> --no-startup-info` (`storeScript`); resolves once /health answers 200. */
/** The store processes started in this fork and still running (on globalThis: file-setup.ts reads it without loading this module). */
const liveStoreProcesses = (): Set<ChildProcess> =>
  ((globalThis as { [LIVE_STORES]?: Set<ChildProcess> })[LIVE_STORES] ??= new Set<ChildProcess>())
const LIVE_STORES = Symbol.for("mcp-store.test.live-store-processes")

export async function spawnStore(options: StoreProcessOptions): Promise<StoreProcess> {
  const script = await storeScript()
  const port = await closedPort()
  const args = [
    ...(options.nodeArgs ?? []),
    script,
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
  const child = spawn(process.execPath, args, { cwd: REPO_ROOT, stdio: ["ignore", "pipe", "pipe"], ...(options.env === undefined ? {} : { env: { ...process.env, ...options.env } }) })
  let output = ""
  child.stdout?.on("data", (c: Buffer) => (output += c.toString("utf8")))
  child.stderr?.on("data", (c: Buffer) => (output += c.toString("utf8")))
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null; at: number }>((resolve) =>
    child.once("exit", (code, signal) => resolve({ code, signal, at: performance.now() }))
  )
  let running = true
  // Known to the file's end (file-setup.ts) until it exits: a test that timed out while this start
  // was still waiting never got its handle to end it.
  const live = liveStoreProcesses()
  live.add(child)
  void exited.then(() => {
    running = false
    live.delete(child)
  })
  const url = `http://127.0.0.1:${port}`
  // Its local services run in process groups of their own, which a SIGKILLed store cannot end (a
  // `sleep` call kept one running two minutes past the suite): ended here with it. A test that wants
  // them left behind kills `child` itself.
  const kill = async () => {
    const groups = running ? childrenOf(child.pid as number).flatMap((pid) => processGroupOf(pid) ?? []).filter((g) => g !== child.pid) : []
    if (running) child.kill("SIGKILL")
    await exited
    for (const pgid of new Set(groups)) killGroup(pgid)
  }
  const healthy = () =>
    fetch(`${url}/health`, { signal: AbortSignal.timeout(1_000) }).then(
      (r) => r.status === 200,
      () => false
    )
  // Polls every 50 ms until /health answers 200 or the process has exited.
  const ready = await eventually(async () => !running || (await healthy()), options.startTimeoutMs ?? 30_000, 50)
  if (!running) throw new Error(`mcp-store exited during start:\n${output}`)
  if (!ready) {
    await kill()
    throw new Error(`mcp-store did not answer /health within the start time-out:\n${output}`)
  }
  return { ...api(url), child, pid: child.pid as number, url, port, exited, output: () => output, kill }
}
