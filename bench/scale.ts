/**
 * Scale and start-up.
 *
 * Scale: 1,000 services over 100 agents (10 each), every one on a Streamable HTTP fixture; the
 * fixtures run in a few bench/fixtures.ts processes, each serving many sessions. Measured from
 * outside the store process: the time from the first add_service to all healthy (polling
 * /monitoring/services_status_distribution every 50 ms), resident memory (/proc VmRSS), CPU used
 * while idle with health checks every 30 s (/proc utime+stime over a window), list_services /
 * list_tools latency at that size; then the store is stopped and started again on the services file
 * it wrote (1,000 services in it): time to the first answer and to all healthy.
 *
 * Start-up: time from spawn to the first answered request (GET /health), with an empty services
 * file and with the demo file (mcp.example.json of the repository: one local demo server).
 */
import { copyFileSync, mkdirSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { HttpClient, summarize, type Latencies } from "./load.js"
import { readProfile, summarizeProfile, type ProfileWindow } from "./profile.js"
import { ROOT, SOURCES_SCRIPT, cpuSeconds, memoryMb, startFixtures, startStore, stopChild, until, type StoreProcess } from "./procs.js"

export interface ScaleOptions {
  readonly agents: number
  readonly perAgent: number
  readonly fixtureProcesses: number
  readonly idleSeconds: number
  /**
   * Seconds from all healthy to the idle window: one health-check interval, in which each service
   * has its first check (its first metric series and history, once) and the registration's garbage
   * is collected. Its CPU is reported on its own (`settleCpuPercent`).
   */
  readonly settleSeconds: number
  readonly listRequests: number
  /** Then a third start, under `node --cpu-prof`: profiled to all healthy, for this many idle seconds, and answering `listRequests` list_services (0: none). */
  readonly profileIdleSeconds: number
  readonly log: (line: string) => void
}

/** JS heap and other memory of the store, from its own /metrics (prom-client's process figures). */
export interface MemoryDetail {
  readonly heapUsedMb: number
  readonly heapTotalMb: number
  readonly externalMb: number
}

export interface ListFigures {
  readonly name: string
  readonly items: number
  readonly latency: Latencies
}

export interface ScaleResult {
  readonly services: number
  readonly agents: number
  readonly fixtureProcesses: number
  /** From the first add_service request to every service healthy. */
  readonly allHealthyMs: number
  /** From the first add_service request to the last add_service answer. */
  readonly addsAnsweredMs: number
  readonly rssMb: number
  readonly rssAfterIdleMb: number
  readonly peakRssMb: number
  readonly idleSeconds: number
  /** Percent of one core while idle. */
  readonly idleCpuPercent: number
  readonly settleSeconds: number
  /** Percent of one core from all healthy to the idle window (each service's first check). */
  readonly settleCpuPercent: number
  readonly lists: ReadonlyArray<ListFigures>
  /** Restart on the file with every service. */
  readonly restartFirstAnswerMs: number
  /** Restart: spawn to the port accepting connections. */
  readonly restartPortOpenMs: number
  readonly restartAllHealthyMs: number
  readonly restartRssMb: number
  /** CPU seconds used while registering (first add_service to all healthy): the store and the fixture processes. */
  readonly registerCpu: { readonly store: number; readonly fixtures: number; readonly wallSeconds: number }
  /** The same for the restart (spawn to all healthy). */
  readonly restartCpu: { readonly store: number; readonly fixtures: number; readonly wallSeconds: number }
  readonly memory: MemoryDetail | undefined
  /** The profiled third start: spawn to all healthy, and idle. */
  readonly profileStart?: ProfileWindow & { readonly file: string }
  readonly profileIdle?: ProfileWindow
  /** The same process answering list_services ?scope=all, one request at a time. */
  readonly profileList?: ProfileWindow
  /** Statuses when a phase did not reach all healthy. */
  readonly notes: ReadonlyArray<string>
}

/** Heap figures from the store's /metrics (text format). */
const memoryDetail = async (http: HttpClient): Promise<MemoryDetail | undefined> => {
  const res = await http.get("/metrics", 10_000).catch(() => undefined)
  if (res === undefined || res.status !== 200) return undefined
  const value = (name: string) => Number(new RegExp(`^\\w*${name} ([0-9.e+]+)$`, "m").exec(res.text)?.[1] ?? NaN) / 1024 ** 2
  return { heapUsedMb: value("nodejs_heap_size_used_bytes"), heapTotalMb: value("nodejs_heap_size_total_bytes"), externalMb: value("nodejs_external_memory_bytes") }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

/** Healthy count and total from the status distribution. */
const distribution = async (http: HttpClient): Promise<{ healthy: number; total: number; all: Record<string, number> }> => {
  const res = await http.get("/monitoring/services_status_distribution", 10_000)
  const body = res.body as { total_services?: number; distribution?: Record<string, number>; data?: { total_services?: number; distribution?: Record<string, number> } }
  const d = body.distribution ?? body.data?.distribution ?? {}
  return { healthy: d["healthy"] ?? 0, total: body.total_services ?? body.data?.total_services ?? 0, all: d }
}

/** Polls until `count` services are healthy; resolves with performance.now() of the first poll that saw it. */
const allHealthy = async (http: HttpClient, count: number, timeoutMs: number): Promise<{ at: number; last: Record<string, number> }> => {
  let last: Record<string, number> = {}
  let at = 0
  await until(
    `${count} services healthy`,
    async () => {
      const d = await distribution(http)
      last = d.all
      at = performance.now()
      return d.healthy >= count
    },
    timeoutMs,
    50
  ).catch((e: unknown) => {
    throw new Error(`${e instanceof Error ? e.message : String(e)}; statuses: ${JSON.stringify(last)}`)
  })
  return { at, last }
}

const timeList = async (http: HttpClient, name: string, path: string, count: (body: unknown) => number, requests: number): Promise<ListFigures> => {
  for (let i = 0; i < Math.min(20, requests); i++) await http.get(path)
  const latencies: number[] = []
  let items = 0
  for (let i = 0; i < requests; i++) {
    const started = performance.now()
    const res = await http.get(path)
    latencies.push(performance.now() - started)
    if (res.status !== 200) throw new Error(`${path}: HTTP ${res.status}`)
    items = count(res.body)
  }
  return { name, items, latency: summarize(latencies) }
}

const agentId = (a: number) => `agent-${String(a).padStart(3, "0")}`

export const runScale = async (dir: string, options: ScaleOptions): Promise<ScaleResult> => {
  const notes: string[] = []
  const fixtureProcs = await Promise.all(Array.from({ length: options.fixtureProcesses }, (_, i) => startFixtures(1, `fixtures-${i}`)))
  const urls = fixtureProcs.flatMap((f) => f.urls)
  const total = options.agents * options.perAgent
  mkdirSync(dir, { recursive: true })
  const configFile = join(dir, "mcp.json")
  writeFileSync(configFile, JSON.stringify({ mcpServers: {} }, null, 2))
  const monitoring = { health_check_seconds: 30 }
  let store: StoreProcess & { readonly startMs: number; readonly portOpenMs: number } = await startStore(configFile, { monitoring, name: "store (scale)" })
  let http = new HttpClient(store.url, 16)
  try {
    const fixturesCpu = () => fixtureProcs.reduce((n, f) => n + cpuSeconds(f.child.pid), 0)
    // Register: one add_service per agent with its services, 16 in flight.
    const storeCpu0 = cpuSeconds(store.child.pid)
    const fixturesCpu0 = fixturesCpu()
    const started = performance.now()
    let next = 0
    let lastAnswer = 0
    const adder = async () => {
      while (next < options.agents) {
        const a = next++
        const mcpServers: Record<string, { url: string }> = {}
        for (let s = 0; s < options.perAgent; s++) mcpServers[`svc-${s}`] = { url: urls[(a * options.perAgent + s) % urls.length]! }
        const res = await http.post(`/for_agent/${agentId(a)}/add_service`, { mcpServers }, 60_000)
        if (res.status !== 200) throw new Error(`add_service ${agentId(a)}: HTTP ${res.status} ${JSON.stringify(res.body).slice(0, 300)}`)
        lastAnswer = performance.now()
      }
    }
    await Promise.all(Array.from({ length: 16 }, adder))
    const healthy = await allHealthy(http, total, 120_000)
    const allHealthyMs = healthy.at - started
    const addsAnsweredMs = lastAnswer - started
    const registerCpu = {
      store: cpuSeconds(store.child.pid) - storeCpu0,
      fixtures: fixturesCpu() - fixturesCpu0,
      wallSeconds: allHealthyMs / 1000
    }
    const rssMb = memoryMb(store.child.pid).rss
    options.log(`  scale: ${total} services healthy in ${allHealthyMs.toFixed(0)} ms (adds answered in ${addsAnsweredMs.toFixed(0)} ms), RSS ${rssMb.toFixed(0)} MB`)

    // Idle: no requests at all while the CPU time is read, from one health-check interval after
    // all are healthy (the first interval is read on its own).
    http.close()
    const settle0 = cpuSeconds(store.child.pid)
    const s0 = performance.now()
    await sleep(options.settleSeconds * 1000)
    const settleCpuPercent = ((cpuSeconds(store.child.pid) - settle0) / ((performance.now() - s0) / 1000)) * 100
    options.log(`  scale: the first ${options.settleSeconds} s after all healthy: ${settleCpuPercent.toFixed(2)} % of one core`)
    const cpu0 = cpuSeconds(store.child.pid)
    const t0 = performance.now()
    await sleep(options.idleSeconds * 1000)
    const idleCpuPercent = ((cpuSeconds(store.child.pid) - cpu0) / ((performance.now() - t0) / 1000)) * 100
    const mem = memoryMb(store.child.pid)
    options.log(`  scale: idle ${options.idleSeconds} s: ${idleCpuPercent.toFixed(2)} % of one core, RSS ${mem.rss.toFixed(0)} MB (peak ${mem.peak.toFixed(0)} MB)`)

    http = new HttpClient(store.url, 4)
    const memory = await memoryDetail(http)
    const after = await distribution(http)
    if (after.healthy < total) notes.push(`after the idle window ${after.healthy} of ${total} were healthy: ${JSON.stringify(after.all)}`)
    const services = (b: unknown) => ((b as { services?: unknown[] }).services ?? []).length
    const tools = (b: unknown) => ((b as { tools?: unknown[] }).tools ?? []).length
    const lists = [
      await timeList(http, "list_services ?scope=all (every service)", "/for_store/list_services?scope=all", services, options.listRequests),
      await timeList(http, "list_services, one agent", `/for_agent/${agentId(0)}/list_services`, services, options.listRequests),
      await timeList(http, "list_tools, one agent", `/for_agent/${agentId(0)}/list_tools`, tools, options.listRequests),
      await timeList(http, "list_services, store scope (empty)", "/for_store/list_services", services, options.listRequests)
    ]
    for (const l of lists) options.log(`  scale: ${l.name}: ${l.items} items, p50 ${l.latency.p50.toFixed(2)} p99 ${l.latency.p99.toFixed(2)} ms`)
    http.close()
    await stopChild(store.child, 20_000)

    // Start again on the file the store wrote.
    const restartDir = join(dir, "restart")
    mkdirSync(restartDir, { recursive: true })
    const restartFile = join(restartDir, "mcp.json")
    copyFileSync(configFile, restartFile)
    const restartFixturesCpu0 = fixturesCpu()
    store = await startStore(restartFile, { monitoring, name: "store (scale restart)", readyTimeoutMs: 60_000 })
    http = new HttpClient(store.url, 4)
    const restarted = await allHealthy(http, total, 120_000)
    const restartAllHealthyMs = restarted.at - store.child.spawnedAt
    const restartCpu = { store: cpuSeconds(store.child.pid), fixtures: fixturesCpu() - restartFixturesCpu0, wallSeconds: restartAllHealthyMs / 1000 }
    const restartRssMb = memoryMb(store.child.pid).rss
    options.log(
      `  scale: restart with ${total} services: first answer ${store.startMs.toFixed(0)} ms, all healthy ${restartAllHealthyMs.toFixed(0)} ms, RSS ${restartRssMb.toFixed(0)} MB`
    )
    const restartFirstAnswerMs = store.startMs
    const restartPortOpenMs = store.portOpenMs
    http.close()
    await stopChild(store.child, 20_000)

    // A third start under the profiler (its figures are not reported as measurements).
    let profileStart: (ProfileWindow & { file: string }) | undefined
    let profileIdle: ProfileWindow | undefined
    let profileList: ProfileWindow | undefined
    if (options.profileIdleSeconds > 0) {
      const profDir = join(dir, "cpuprofile")
      const profFile = join(dir, "profiled", "mcp.json")
      mkdirSync(join(dir, "profiled"), { recursive: true })
      copyFileSync(configFile, profFile)
      store = await startStore(profFile, { monitoring, name: "store (scale, profiled)", readyTimeoutMs: 60_000, nodeArgs: ["--cpu-prof", `--cpu-prof-dir=${profDir}`], script: SOURCES_SCRIPT })
      http = new HttpClient(store.url, 4)
      const healthyAt = (await allHealthy(http, total, 120_000)).at - store.child.spawnedAt
      http.close()
      await sleep(2_000)
      const idleFrom = performance.now() - store.child.spawnedAt
      await sleep(options.profileIdleSeconds * 1000)
      const idleTo = performance.now() - store.child.spawnedAt
      // Then list_services of every scope, one request at a time.
      http = new HttpClient(store.url, 2)
      const listFrom = performance.now() - store.child.spawnedAt
      for (let i = 0; i < options.listRequests; i++) await http.get("/for_store/list_services?scope=all")
      const listTo = performance.now() - store.child.spawnedAt
      http.close()
      await stopChild(store.child, 20_000)
      const { file, profile } = readProfile(profDir)
      profileStart = { file, ...summarizeProfile(profile, 0, healthyAt) }
      profileIdle = summarizeProfile(profile, idleFrom, idleTo)
      profileList = summarizeProfile(profile, listFrom, listTo)
      options.log(`  scale: profiled start (${(healthyAt / 1000).toFixed(1)} s to all healthy) and ${options.profileIdleSeconds} s idle: busy ${(profileIdle.busyMs / 1000).toFixed(2)} s while idle`)
    }
    return {
      services: total,
      agents: options.agents,
      fixtureProcesses: options.fixtureProcesses,
      allHealthyMs,
      addsAnsweredMs,
      rssMb,
      rssAfterIdleMb: mem.rss,
      peakRssMb: mem.peak,
      idleSeconds: options.idleSeconds,
      idleCpuPercent,
      settleSeconds: options.settleSeconds,
      settleCpuPercent,
      lists,
      restartFirstAnswerMs,
      restartPortOpenMs,
      restartAllHealthyMs,
      restartRssMb,
      registerCpu,
      restartCpu,
      memory,
      ...(profileStart ? { profileStart } : {}),
      ...(profileIdle ? { profileIdle } : {}),
      ...(profileList ? { profileList } : {}),
      notes
    }
  } finally {
    http.close()
    await stopChild(store.child, 20_000)
    await Promise.all(fixtureProcs.map((f) => stopChild(f.child)))
  }
}

export interface StartupFigures {
  readonly name: string
  /** Spawn to the first answered request, per run. */
  readonly runs: ReadonlyArray<number>
  readonly latency: Latencies
  /** Spawn to the port accepting connections (before the store can answer). */
  readonly portOpen: Latencies
  /** Demo file only: spawn to the demo service healthy. */
  readonly healthy?: Latencies
  /** An experiment, not the product. */
  readonly experiment?: boolean
}

type StartupKind = { readonly name: string; readonly file: "empty" | "demo"; readonly script?: string; readonly experiment?: boolean }

/**
 * Start-up time, `runs` times each with an empty file and with the demo file, and (when `bundle`
 * is given) with the esbuild bundle of the same sources; the kinds alternate run by run.
 */
export const runStartup = async (
  dir: string,
  runs: number,
  log: (line: string) => void,
  sources: string
): Promise<StartupFigures[]> => {
  const kinds: StartupKind[] = [
    { name: "empty services file", file: "empty" },
    { name: "demo services file (mcp.example.json)", file: "demo" },
    { name: "empty file, sources through tsx (scripts/dev.mjs, development)", file: "empty", script: sources, experiment: true }
  ]
  const data = kinds.map(() => ({ first: [] as number[], open: [] as number[], healthy: [] as number[] }))
  for (let i = 0; i < runs; i++) {
    for (const [k, kind] of kinds.entries()) {
      const runDir = join(dir, `${k}-${i}`)
      mkdirSync(runDir, { recursive: true })
      const file = join(runDir, "mcp.json")
      if (kind.file === "empty") writeFileSync(file, JSON.stringify({ mcpServers: {} }))
      else copyFileSync(join(ROOT, "mcp.example.json"), file) // its demo server (mcp-store/demo-server) resolves from the store's cwd, the repository
      const store = await startStore(file, { name: `store (start-up, ${kind.name})`, ...(kind.script ? { script: kind.script } : {}) })
      const d = data[k]!
      try {
        d.first.push(store.startMs)
        d.open.push(store.portOpenMs)
        if (kind.file === "demo") {
          const http = new HttpClient(store.url, 2)
          const res = await http.post("/for_store/wait_service", { client_id_or_service_name: "demo", status: "healthy", timeout: 30 }, 35_000)
          http.close()
          if ((res.body as { data?: { result?: boolean } }).data?.result === true) d.healthy.push(performance.now() - store.child.spawnedAt)
        }
      } finally {
        await stopChild(store.child)
      }
    }
  }
  const figures = kinds.map((kind, k): StartupFigures => {
    const d = data[k]!
    return {
      name: kind.name,
      runs: d.first,
      latency: summarize(d.first),
      portOpen: summarize(d.open),
      ...(d.healthy.length > 0 ? { healthy: summarize(d.healthy) } : {}),
      ...(kind.experiment ? { experiment: true } : {})
    }
  })
  for (const f of figures) log(`  start-up, ${f.name}: first answer p50 ${f.latency.p50.toFixed(0)} ms (port open ${f.portOpen.p50.toFixed(0)} ms)${f.healthy ? `, demo healthy p50 ${f.healthy.p50.toFixed(0)} ms` : ""}`)
  return figures
}
