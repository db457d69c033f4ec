/**
 * The benchmark suite (`npm run bench`): tool-call overhead against direct calls and mcp-hub, a CPU
 * profile of the store under load, wait_service reaction, 1,000 services over 100 agents, start-up,
 * bench/records.ts, the caps under a flood (bench/caps.ts), replicas on one Redis (bench/replicas.ts), and the two protocol
 * eras side by side (bench/eras.ts). Prints a table and writes
 * bench/RESULTS.md (bench/RESULTS.quick.md for a quick run). Every server runs on 127.0.0.1 in a
 * child process; every child is ended at the end, on error and on SIGINT/SIGTERM; the whole run is
 * bounded (BENCH_MAX_MINUTES, default 14).
 *
 * Environment:
 *   BENCH_QUICK=1          smoke run: few calls per cell, 200 services, short idle window (~2 min)
 *   BENCH_CALLS=n          measured calls per cell (default 2000; quick 200)
 *   BENCH_WARMUP=n         warm-up calls per cell (default 300; quick 50)
 *   BENCH_SCALE_AGENTS=n   agents of 10 services each (default 100; quick 20)
 *   BENCH_IDLE_SECONDS=n   idle CPU window (default 60; quick 10)
 *   BENCH_SETTLE_SECONDS=n from all healthy to the idle window: one health-check interval and 3 s (default 33; quick 5)
 *   BENCH_WAIT_CYCLES=n    wait_service cycles, 2 waits each (default 150; quick 20)
 *   BENCH_STARTUP_RUNS=n   start-ups per kind (default 5; quick 2)
 *   BENCH_PROFILE_IDLE_SECONDS=n  idle window of the profiled third start of the scale store (default 30; quick 5; 0: no third start)
 *   BENCH_CAPS_ATTEMPTS=n  initialize calls and /events attempts of the caps section (default 5000; quick 1000)
 *   BENCH_FLOOD=n          notifications per call of the progress section's floods (default 20000; quick 2000)
 *   BENCH_FAILOVER_ROUNDS=n  SIGKILLs of the service's owner in the replicas section (default 3; quick 1)
 *   BENCH_PROPAGATION_ROUNDS=n  restarts on the owner waited for on another replica, replicas section (default 5; quick 3)
 *   BENCH_SKIP=a,b         sections to skip: calls, resources, progress, floor, profile, wait, scale, startup, records, caps, replicas, eras, install
 *   BENCH_TRANSPORTS=a,b   call cells and profiles to run: http, stdio (default both)
 *   BENCH_CONCURRENCY=a,b  call cells' concurrencies (default 1,8,32,128)
 *   BENCH_OUT=path         where to write the results (default bench/RESULTS.md, quick: bench/RESULTS.quick.md)
 *   BENCH_KEEP=1           keep the temporary directory (CPU profiles, services files, tool records)
 */
import { execFileSync } from "node:child_process"
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { cpus, loadavg, release, tmpdir, totalmem } from "node:os"
import { join } from "node:path"
import { runCaps } from "./caps.js"
import { installMarkdown, runInstall, writeInstallSection, type InstallFigures } from "./install.js"
import { runCalls } from "./calls.js"
import { countAbortListenerWarnings } from "./load.js"
import { runResourceReads } from "./resources.js"
import { runProgress } from "./progress.js"
import { runFloor, runIdleFloor } from "./floor.js"
import { profileStartup, profileStoreCell } from "./profile.js"
import { ROOT, SOURCES_SCRIPT, TSX_IMPORT, buildStore, killAllNow, spawnChild, startFixtures, stopAll, stopChild } from "./procs.js"
import { ANALYSIS_END, ANALYSIS_START, markdownReport, textReport, type Results } from "./report.js"
import { canRunReplicas, replicasMarkdown, runReplicas, writeReplicasSection, type ReplicasResult } from "./replicas.js"
import { runScale, runStartup } from "./scale.js"
import { runWait } from "./wait.js"
import { erasMarkdown, runEras, writeErasSection, type ErasCell } from "./eras.js"

const env = process.env
const quick = env["BENCH_QUICK"] === "1"
const num = (name: string, full: number, fast: number) => {
  const v = env[name]
  return v !== undefined && v !== "" ? Number(v) : quick ? fast : full
}
const CALLS = num("BENCH_CALLS", 2000, 200)
const WARMUP = num("BENCH_WARMUP", 300, 50)
const AGENTS = num("BENCH_SCALE_AGENTS", 100, 20)
const IDLE_SECONDS = num("BENCH_IDLE_SECONDS", 60, 10)
const SETTLE_SECONDS = num("BENCH_SETTLE_SECONDS", 33, 5)
const WAIT_CYCLES = num("BENCH_WAIT_CYCLES", 150, 20)
const STARTUP_RUNS = num("BENCH_STARTUP_RUNS", 5, 2)
const PROFILE_IDLE_SECONDS = num("BENCH_PROFILE_IDLE_SECONDS", 30, 5)
const FLOOD = num("BENCH_FLOOD", 20_000, 2_000)
const CAPS_ATTEMPTS = num("BENCH_CAPS_ATTEMPTS", 5000, 1000)
const FAILOVER_ROUNDS = num("BENCH_FAILOVER_ROUNDS", 3, 1)
const PROPAGATION_ROUNDS = num("BENCH_PROPAGATION_ROUNDS", 5, 3)
const MAX_MINUTES = num("BENCH_MAX_MINUTES", 14, 6)
const list = (name: string, full: ReadonlyArray<string>) => {
  const v = (env[name] ?? "").split(",").map((s) => s.trim()).filter(Boolean)
  return v.length > 0 ? v : full
}
const CONCURRENCIES = list("BENCH_CONCURRENCY", ["1", "8", "32", "128"]).map(Number)
const TRANSPORTS = list("BENCH_TRANSPORTS", ["http", "stdio"]).filter((t): t is "http" | "stdio" => t === "http" || t === "stdio")
const skip = new Set((env["BENCH_SKIP"] ?? "").split(",").map((s) => s.trim()).filter(Boolean))
const OUT = env["BENCH_OUT"] ?? join(ROOT, "bench", quick ? "RESULTS.quick.md" : "RESULTS.md")

const started = performance.now()
const log = (line: string) => process.stdout.write(`${line}\n`)
const load = () => loadavg().map((l) => l.toFixed(2)).join(", ")
const gitState = () => {
  try {
    const head = execFileSync("git", ["rev-parse", "--short", "HEAD"], { cwd: ROOT, encoding: "utf8" }).trim()
    const changed = execFileSync("git", ["status", "--porcelain", "--", "src", "bin"], { cwd: ROOT, encoding: "utf8" }).split("\n").filter(Boolean)
    return `${head}${changed.length > 0 ? ` with ${changed.length} uncommitted change(s) in src/ and bin/: ${changed.map((l) => l.slice(3)).join(", ")}` : ""}`
  } catch {
    return "unknown"
  }
}
const version = (pkg: string) => (JSON.parse(readFileSync(join(ROOT, "node_modules", pkg, "package.json"), "utf8")) as { version: string }).version

// The direct MCP SDK client's abort-listener warnings: counted and reported instead of printed.
const abortListenerWarnings = countAbortListenerWarnings()

// Every child is ended however the run ends.
let cleaning: Promise<void> | undefined
const cleanup = () => (cleaning ??= stopAll())
// A persistent handler: npm and tsx pass a Ctrl-C on, so a second SIGINT follows the first, and tsx's
// preflight ends a process that has no listener left for it (which would cut the clean-up short).
for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"] as const) {
  process.on(signal, () => {
    if (cleaning) return
    log(`\n${signal}: ending every child process`)
    void cleanup().finally(() => process.exit(130))
  })
}
process.on("exit", () => killAllNow())
const watchdog = setTimeout(() => {
  log(`\nbench: over ${MAX_MINUTES} minutes: giving up, ending every child process`)
  void cleanup().finally(() => process.exit(2))
}, MAX_MINUTES * 60_000)
watchdog.unref()

const dir = mkdtempSync(join(tmpdir(), "mcp-store-bench-"))
const results: Results = {
  meta: {
    date: new Date().toISOString(),
    node: process.version,
    cpu: cpus()[0]?.model.trim() ?? "unknown",
    cores: cpus().length,
    memoryGb: totalmem() / 1024 ** 3,
    kernel: `${process.platform} ${release()}`,
    mode: quick ? "quick (BENCH_QUICK=1: a smoke run, figures not comparable)" : "full",
    callsPerCell: CALLS,
    warmup: WARMUP,
    concurrencies: CONCURRENCIES,
    loadBefore: load(),
    loadAfter: "",
    loads: [],
    durationSeconds: 0,
    hubVersion: version("mcp-hub"),
    git: gitState(),
    storeVersion: (JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")) as { version: string }).version
  },
  failures: []
}

/** Runs a section; a failure is recorded and the run goes on. */
const section = async (name: string, run: () => Promise<void>) => {
  if (skip.has(name)) return log(`\n[${name}] skipped (BENCH_SKIP)`)
  results.meta.loads.push({ phase: name, load: loadavg()[0]!.toFixed(2) })
  const t0 = performance.now()
  log(`\n[${name}] load ${load()}`)
  try {
    await run()
  } catch (e) {
    const error = e instanceof Error ? e.message : String(e)
    results.failures.push({ section: name, error: error.split("\n").slice(0, 6).join(" / ") })
    log(`  FAILED: ${error}`)
    await stopAll() // whatever the section left running
  }
  log(`  (${((performance.now() - t0) / 1000).toFixed(0)} s)`)
}

let install: InstallFigures | undefined
let replicas: ReplicasResult | undefined
let eras: { cells: ErasCell[]; calls: number; rounds: number } | undefined
try {
  log(`mcp-store benchmark: ${results.meta.mode}; node ${process.version}; load ${results.meta.loadBefore}; temp ${dir}`)
  // The store runs as `npm start` runs it: the bundle, built here from the sources measured.
  results.bundleBuildMs = buildStore()
  log(`built dist/mcp-store.mjs in ${results.bundleBuildMs.toFixed(0)} ms`)
  const fixtures = await startFixtures(1, "fixtures (calls)")
  const httpUrl = fixtures.urls[0]!

  await section("calls", async () => {
    const { cells, close } = await runCalls(join(dir, "calls"), httpUrl, {
      concurrencies: CONCURRENCIES,
      transports: TRANSPORTS,
      calls: CALLS,
      warmup: WARMUP,
      maxSeconds: 90,
      fixturePid: fixtures.child.pid,
      log
    })
    results.calls = cells
    await close()
  })

  await section("resources", async () => {
    results.resources = await runResourceReads(join(dir, "resources"), { concurrencies: CONCURRENCIES, calls: CALLS, warmup: WARMUP, maxSeconds: 60, log })
  })

  await section("progress", async () => {
    results.progress = await runProgress(join(dir, "progress"), {
      concurrencies: CONCURRENCIES.filter((c) => c <= 8),
      calls: Math.max(50, Math.round(CALLS / 4)),
      warmup: Math.max(20, Math.round(WARMUP / 3)),
      maxSeconds: 60,
      floodCalls: 8,
      floodCount: FLOOD,
      log
    })
  })

  await section("floor", async () => {
    results.floor = await runFloor({ concurrencies: CONCURRENCIES, calls: CALLS, warmup: WARMUP, maxSeconds: 60 })
    for (const c of results.floor) log(`  HTTP floor c=${String(c.concurrency).padEnd(3)} ${c.rate.toFixed(0).padStart(6)} calls/s  p50 ${c.p50.toFixed(2)} ms  server CPU ${c.cpuUsPerCall.toFixed(0)} us/call`)
    // The scale section's health checks: every service once per 30 s.
    const services = AGENTS * 10
    results.idleFloor = { services, percent: await runIdleFloor({ ratePerSecond: services / 30, seconds: quick ? 5 : 20 }) }
    log(`  idle floor: a bare client sending ${(services / 30).toFixed(1)} requests/s: ${results.idleFloor.percent.toFixed(2)} % of one core`)
  })

  // A failed section ends every child: the fixtures are started again if so.
  const alive = fixtures.child.proc.exitCode === null && fixtures.child.proc.signalCode === null
  const fixtures2 = alive ? fixtures : await startFixtures(1, "fixtures (profile, wait)")
  const url2 = fixtures2.urls[0]!

  await section("profile", async () => {
    for (const transport of TRANSPORTS) {
      const p = await profileStoreCell(join(dir, `profile-${transport}`), url2, { transport, calls: CALLS, warmup: WARMUP, concurrency: 32, maxSeconds: 90 })
      if (transport === "http") results.profile = p
      else results.profileStdio = p
      log(`  profiled c=32 ${transport} cell: ${p.run.rate.toFixed(0)} calls/s; busy ${(p.busyMs / 1000).toFixed(1)} of ${(p.windowMs / 1000).toFixed(1)} s`)
      for (const s of p.byLayer) log(`    ${s.percent.toFixed(1).padStart(5)} %  ${s.name}`)
    }
  })

  await section("wait", async () => {
    results.wait = await runWait(join(dir, "wait"), url2, { cycles: WAIT_CYCLES, fanoutCycles: quick ? 3 : 10, fanoutWaiters: 50, log })
  })
  await stopChild(fixtures2.child)

  await section("scale", async () => {
    results.scale = await runScale(join(dir, "scale"), {
      agents: AGENTS,
      perAgent: 10,
      fixtureProcesses: 4,
      idleSeconds: IDLE_SECONDS,
      settleSeconds: SETTLE_SECONDS,
      listRequests: quick ? 50 : 200,
      profileIdleSeconds: PROFILE_IDLE_SECONDS,
      log
    })
  })

  await section("startup", async () => {
    results.startup = await runStartup(join(dir, "startup"), STARTUP_RUNS, log, SOURCES_SCRIPT)
    results.startupProfile = await profileStartup(join(dir, "startup"))
  })

  await section("records", async () => {
    const args = quick ? ["--records", "20000", "--seconds", "0.5", "--rounds", "1"] : ["--records", "200000", "--seconds", "2", "--rounds", "2"]
    const child = spawnChild("bench/records.ts", process.execPath, [...TSX_IMPORT, join(ROOT, "bench", "records.ts"), ...args], { stdout: "pipe" })
    let out = ""
    child.proc.stdout?.setEncoding("utf8")
    child.proc.stdout?.on("data", (c: string) => (out += c))
    let timer: NodeJS.Timeout | undefined
    const code = await Promise.race([child.exited, new Promise<"timeout">((r) => (timer = setTimeout(() => r("timeout"), 180_000)))])
    clearTimeout(timer)
    if (code === "timeout") {
      await stopChild(child)
      throw new Error("bench/records.ts did not finish within 180 s")
    }
    if (code !== 0) throw new Error(`bench/records.ts exited with ${code}: ${child.tail()}`)
    results.records = out
    log(out.trimEnd().split("\n").map((l) => `  ${l}`).join("\n"))
  })

  await section("caps", async () => {
    results.caps = await runCaps(join(dir, "caps"), { attempts: CAPS_ATTEMPTS, concurrency: 50, idleSeconds: 5, maxSeconds: 60, log })
  })

  // Replicas on one Redis (bench/replicas.ts): its section is appended to the results file.
  await section("replicas", async () => {
    if (!canRunReplicas()) {
      log("  skipped: redis-server is not installed")
      return
    }
    replicas = await runReplicas(join(dir, "replicas"), { calls: CALLS, warmup: WARMUP, rounds: FAILOVER_ROUNDS, propagationRounds: PROPAGATION_ROUNDS, log })
  })

  // The two protocol eras side by side (bench/eras.ts): its section is appended to the results file.
  await section("eras", async () => {
    const calls = quick ? 100 : 400
    const rounds = quick ? 2 : 6
    eras = { cells: await runEras(join(dir, "eras"), { calls, rounds, log }), calls, rounds }
  })

  // The package as installed (bench/install.ts): its section is appended to the results file.
  await section("install", async () => {
    install = await runInstall(join(dir, "install"), { runs: STARTUP_RUNS, log })
  })
} catch (e) {
  results.failures.push({ section: "setup", error: e instanceof Error ? e.message : String(e) })
  log(`bench: ${e instanceof Error ? e.stack : String(e)}`)
} finally {
  await cleanup()
  clearTimeout(watchdog)
}

results.meta.loadAfter = load()
results.abortListenerWarnings = abortListenerWarnings()
results.meta.durationSeconds = (performance.now() - started) / 1000

// Carry a hand-written analysis over from the previous results file.
let analysis: string | undefined
if (existsSync(OUT)) {
  const previous = readFileSync(OUT, "utf8")
  const a = previous.indexOf(ANALYSIS_START)
  const b = previous.indexOf(ANALYSIS_END)
  if (a >= 0 && b > a) analysis = previous.slice(a + ANALYSIS_START.length, b)
}
writeFileSync(OUT, markdownReport(results, analysis))
if (install !== undefined) writeInstallSection(OUT, installMarkdown(install, results.meta.git))
if (replicas !== undefined) writeReplicasSection(OUT, replicasMarkdown(replicas, results.meta.git))
if (eras !== undefined) writeErasSection(OUT, erasMarkdown(eras.cells, results.meta.git, eras.calls, eras.rounds))
log(`\n${textReport(results)}\n\nWritten: ${OUT}`)
if (env["BENCH_KEEP"] === "1") log(`Kept: ${dir} (profiles, services files)`)
else rmSync(dir, { recursive: true, force: true })
process.exitCode = results.failures.length > 0 ? 1 : 0
