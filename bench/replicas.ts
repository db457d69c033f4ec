/**
 * Replicas on one Redis (issue 17, docs/replicas.md): what a cluster of store processes costs and
 * how fast it recovers, on one machine, loopback only. A real redis-server (test/support/redis.ts)
 * and real store processes (the bundle, `--redis-url`), one Streamable HTTP fixture upstream
 * (bench/fixtures.ts) defined as the one store service `fx-http`:
 *
 * 1. throughput of call_tool at c=32 over 1, 2 and 3 replicas, the client rotating its requests over
 *    them, with the CPU time per call of the replicas together (and of Redis and the upstream);
 * 2. the latency of a call sent to a replica that does not own the service (forwarded to the owner)
 *    against one sent to the owner, and a direct SDK call to the upstream as the floor: the three
 *    interleaved one by one in one run;
 * 3. failover: SIGKILL the owner of `fx-http` (the holder of its lease in Redis), time until the
 *    lease is held by another replica, until a surviving replica shows the service healthy in a state
 *    entered after the kill, and until a call through a surviving replica succeeds; several rounds,
 *    a replica started again after each to keep three.
 *
 * Without service leases (the core before item 3 of issue 17: every replica connects to every
 * service itself) cell 2 compares two replicas that both call the upstream themselves, and cell 3
 * has no owner to kill: both say so in their notes instead of inventing figures.
 *
 *   npx tsx bench/replicas.ts [--write]   (BENCH_QUICK, BENCH_CALLS, BENCH_WARMUP as in run.ts;
 *                                          BENCH_FAILOVER_ROUNDS, default 3; --write: the "Replicas"
 *                                          section of bench/RESULTS.md)
 */
import { execFileSync } from "node:child_process"
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { loadavg, tmpdir } from "node:os"
import { join, resolve } from "node:path"
import { fileURLToPath } from "node:url"
import { parseArgs } from "node:util"
import { createClient } from "redis"
import { clusterKey } from "../src/cluster/keys.js"
import { hasRedisServer, startRedisServer, type RedisServer } from "../test/support/redis.js"
import { directClient, storeCallerFor } from "./calls.js"
import { HttpClient, closedLoop, summarize, type Latencies } from "./load.js"
import { ROOT, buildStore, cpuSeconds, onCleanup, startFixtures, startStore, stopAll, stopChild, trackPid, type StoreProcess } from "./procs.js"
import { writeMarkedSection } from "./report.js"

/** The one service of the cluster; the name calls.ts's callers use for the HTTP fixture. */
const SERVICE = "fx-http"
const CLUSTER = "bench"
/** Redis's lease key of the store service (src/cluster/leases.ts: `lease:<scope>/<name>`). */
const LEASE_KEY = clusterKey(CLUSTER, "lease", `store/${SERVICE}`)
/** The default lease time to live of `--lease-ms`, which the benchmark does not change. */
export const LEASE_TTL_MS = 5_000

export interface ThroughputRow {
  readonly replicas: number
  readonly rate: number
  readonly p50: number
  readonly p99: number
  readonly errors: number
  readonly firstError: string | null
  /** CPU time of every replica together per call (µs), warm-up included, as calls.ts counts. */
  readonly replicasCpuUsPerCall: number
  readonly redisCpuUsPerCall: number
  readonly upstreamCpuUsPerCall: number
  /** Share of the calls sent to a replica that does not own the service (0 without service leases). */
  readonly forwardedShare: number
}

export type LatencyWay = "direct" | "owner" | "forwarded"
export interface LatencyRow extends Latencies {
  readonly way: LatencyWay
  readonly errors: number
}

export interface FailoverRound {
  readonly round: number
  /** From the SIGKILL to the lease held by another replica (ms); null when not seen in time. */
  readonly leaseMs: number | null
  /** From the SIGKILL to a surviving replica showing the service healthy, entered after the kill (ms). */
  readonly healthyMs: number | null
  /** From the SIGKILL to the first successful call_tool through a surviving replica (ms). */
  readonly callMs: number | null
  /** Calls that failed through the survivors before that one. */
  readonly failedCalls: number
}

export interface ReplicasResult {
  readonly date: string
  readonly load: string
  readonly calls: number
  readonly leaseTtlMs: number
  /** True when the service's lease key exists in Redis (one owner per service built). */
  readonly ownership: boolean
  readonly throughput: ReadonlyArray<ThroughputRow>
  readonly latency: ReadonlyArray<LatencyRow>
  readonly failover: ReadonlyArray<FailoverRound>
  readonly notes: ReadonlyArray<string>
}

export interface ReplicasOptions {
  readonly calls: number
  readonly warmup: number
  readonly rounds: number
  readonly log: (line: string) => void
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms))

/** A replica: the store process and a keep-alive client to it. */
interface Replica {
  readonly store: StoreProcess
  readonly http: HttpClient
  readonly dir: string
}

const median = (values: ReadonlyArray<number>): number => summarize(values).p50

/** Runs the three cells; every process it starts is ended before it resolves (and by `stopAll` on error). */
export const runReplicas = async (dir: string, options: ReplicasOptions): Promise<ReplicasResult> => {
  const { log } = options
  const notes: string[] = []
  const fixtures = await startFixtures(1, "fixtures (replicas)")
  const upstreamUrl = fixtures.urls[0]!
  const redis: RedisServer = await startRedisServer()
  trackPid(redis.pid())
  const unregisterRedis = onCleanup(() => redis.stop({ kill: true }))
  const client = createClient({ url: redis.url })
  client.on("error", () => undefined)
  await client.connect()
  const unregisterClient = onCleanup(() => client.destroy())
  const replicas: Replica[] = []
  const direct = await directClient("http", upstreamUrl)
  let serial = 0

  const startReplica = async (): Promise<Replica> => {
    const rdir = join(dir, `replica-${serial++}`)
    mkdirSync(rdir, { recursive: true })
    const configFile = join(rdir, "mcp.json")
    // The first replica of the empty cluster imports its file; the others' files are not read again.
    writeFileSync(configFile, JSON.stringify({ mcpServers: { [SERVICE]: { url: upstreamUrl } } }, null, 2))
    const t0 = performance.now()
    const store = await startStore(configFile, { name: `replica ${serial}`, args: ["--redis-url", redis.url, "--cluster-name", CLUSTER] })
    const replica: Replica = { store, http: new HttpClient(store.url, 64), dir: rdir }
    const res = await replica.http.post("/for_store/wait_service", { client_id_or_service_name: SERVICE, status: "healthy", timeout: 30 }, 35_000)
    if ((res.body as { data?: { result?: boolean } } | undefined)?.data?.result !== true) {
      throw new Error(`replica ${serial}: ${SERVICE} not healthy: ${res.text.slice(0, 300)}`)
    }
    options.log(`  replica ${serial} (pid ${store.child.pid}) up in ${store.startMs.toFixed(0)} ms, ${SERVICE} healthy on it after ${(performance.now() - t0).toFixed(0)} ms`)
    return replica
  }
  const stopReplica = async (r: Replica) => {
    r.http.close()
    await stopChild(r.store.child)
  }
  const holder = async (): Promise<string | null> => await client.get(LEASE_KEY)
  const byHolder = (id: string | null) => (id === null ? undefined : replicas.find((r) => id.includes(`-${r.store.child.pid}-`)))

  try {
    // 1. Throughput at c=32 over 1, 2, 3 replicas, a replica added before each step.
    const throughput: ThroughputRow[] = []
    for (let n = 1; n <= 3; n++) {
      replicas.push(await startReplica())
      const owner = byHolder(await holder())
      const callers = replicas.map((r) => storeCallerFor(r.http, "http"))
      const pids = replicas.map((r) => r.store.child.pid)
      const total = options.warmup + options.calls
      const before = { replicas: pids.map(cpuSeconds), redis: cpuSeconds(redis.pid()), upstream: cpuSeconds(fixtures.child.pid) }
      const run = await closedLoop((i) => callers[i % n]!(`t${n}-${i}`), { concurrency: 32, calls: options.calls, warmup: options.warmup, maxSeconds: 30 })
      const spent = (now: number, then: number) => ((now - then) * 1e6) / total
      const row: ThroughputRow = {
        replicas: n,
        rate: run.rate,
        p50: run.p50,
        p99: run.p99,
        errors: run.errors,
        firstError: run.firstError,
        replicasCpuUsPerCall: spent(pids.reduce((s, pid) => s + cpuSeconds(pid), 0), before.replicas.reduce((a, b) => a + b, 0)),
        redisCpuUsPerCall: spent(cpuSeconds(redis.pid()), before.redis),
        upstreamCpuUsPerCall: spent(cpuSeconds(fixtures.child.pid), before.upstream),
        forwardedShare: owner === undefined ? 0 : (n - 1) / n
      }
      throughput.push(row)
      log(
        `  c=32 over ${n} replica(s): ${row.rate.toFixed(0).padStart(6)} calls/s  p50 ${row.p50.toFixed(2)} p99 ${row.p99.toFixed(2)} ms  ` +
          `CPU/call: replicas ${row.replicasCpuUsPerCall.toFixed(0)} µs, Redis ${row.redisCpuUsPerCall.toFixed(0)} µs, upstream ${row.upstreamCpuUsPerCall.toFixed(0)} µs` +
          (run.errors > 0 ? `  ${run.errors} errors: ${run.firstError}` : "") +
          (run.cut ? "  (cut by the time limit)" : "")
      )
    }

    // 2. Forwarded vs on the owner vs direct, interleaved one call at a time (c=1).
    const ownerId = await holder()
    const ownership = ownerId !== null
    const owner = byHolder(ownerId) ?? replicas[0]!
    const other = replicas.find((r) => r !== owner)!
    if (!ownership) {
      notes.push(
        `No lease key ${LEASE_KEY} in Redis: services are not owned by one replica in this build (every replica connects to the upstream itself), ` +
          `so the "forwarded" row is a second replica calling the upstream itself, not a forwarded call, and the failover cell has no owner to kill.`
      )
    } else if (byHolder(ownerId) === undefined) {
      throw new Error(`the lease of ${SERVICE} is held by ${ownerId}, not one of the replicas started here`)
    }
    const ways: Record<LatencyWay, (text: string) => Promise<void>> = {
      direct: direct.call,
      owner: storeCallerFor(owner.http, "http"),
      forwarded: storeCallerFor(other.http, "http")
    }
    const order: ReadonlyArray<LatencyWay> = ["direct", "owner", "forwarded"]
    const samples: Record<LatencyWay, number[]> = { direct: [], owner: [], forwarded: [] }
    const errors: Record<LatencyWay, number> = { direct: 0, owner: 0, forwarded: 0 }
    const perWay = Math.min(options.calls, 1000)
    const latencyDeadline = performance.now() + 30_000
    for (let i = -options.warmup; i < perWay && performance.now() < latencyDeadline; i++) {
      for (let k = 0; k < order.length; k++) {
        const way = order[(k + i + options.warmup) % order.length]!
        const started = performance.now()
        try {
          await ways[way](`l-${way}-${i}`)
          if (i >= 0) samples[way].push(performance.now() - started)
        } catch {
          if (i >= 0) errors[way]++
        }
      }
    }
    const latency: LatencyRow[] = order.map((way) => ({ way, ...summarize(samples[way]), errors: errors[way] }))
    for (const row of latency) {
      log(`  c=1 ${row.way.padEnd(9)} p50 ${row.p50.toFixed(3)} p99 ${row.p99.toFixed(3)} ms  (${row.count} calls${row.errors > 0 ? `, ${row.errors} errors` : ""})`)
    }

    // 3. Failover: SIGKILL the owner, then a replica started again to keep three.
    const failover: FailoverRound[] = []
    if (ownership) {
      for (let round = 1; round <= options.rounds; round++) {
        const id = await holder()
        const victim = byHolder(id)
        if (id === null || victim === undefined) {
          notes.push(`Failover round ${round}: no replica held the lease of ${SERVICE} before the kill (holder: ${String(id)}); rounds stopped.`)
          break
        }
        const survivors = replicas.filter((r) => r !== victim)
        const result = await failoverRound(victim, survivors, id, holder)
        failover.push({ round, ...result })
        log(
          `  failover ${round}: lease moved ${fmtMs(result.leaseMs)}, healthy elsewhere ${fmtMs(result.healthyMs)}, ` +
            `first call through a survivor ${fmtMs(result.callMs)} (${result.failedCalls} failed before)`
        )
        replicas.splice(replicas.indexOf(victim), 1)
        victim.http.close()
        await stopChild(victim.store.child) // reaps it (and anything left in its group)
        replicas.push(await startReplica())
      }
    }
    return {
      date: new Date().toISOString(),
      load: loadavg().map((l) => l.toFixed(2)).join(", "),
      calls: options.calls,
      leaseTtlMs: LEASE_TTL_MS,
      ownership,
      throughput,
      latency,
      failover,
      notes
    }
  } finally {
    await Promise.all(replicas.map(stopReplica))
    await direct.close()
    unregisterClient()
    client.destroy()
    unregisterRedis()
    await redis.stop({ kill: true })
    await stopChild(fixtures.child)
  }
}

const fmtMs = (v: number | null) => (v === null ? "not within 30 s" : `${v.toFixed(0)} ms`)

/**
 * One failover: SIGKILL `victim` and watch, at once, the lease (Redis, every 5 ms), the service's
 * status on the survivors (every 10 ms: healthy in a state entered after the kill) and calls through
 * the survivors (a new one every 20 ms, at most 20 pending); each probe stops at its first success
 * or after 30 s.
 */
const failoverRound = async (
  victim: Replica,
  survivors: ReadonlyArray<Replica>,
  victimId: string,
  holder: () => Promise<string | null>
): Promise<Omit<FailoverRound, "round">> => {
  const killedWall = Date.now()
  const killedAt = performance.now()
  process.kill(victim.store.child.pid, "SIGKILL")
  const limit = killedAt + 30_000
  const elapsed = () => performance.now() - killedAt

  const lease = (async () => {
    while (performance.now() < limit) {
      const id = await holder().catch(() => null)
      if (id !== null && id !== victimId) return elapsed()
      await sleep(5)
    }
    return null
  })()

  const healthy = (async () => {
    while (performance.now() < limit) {
      for (const r of survivors) {
        const res = await r.http.get(`/for_store/service_status/${SERVICE}`, 2_000).catch(() => undefined)
        const body = res?.body as { status?: string; state_entered_at?: string } | undefined
        if (body?.status === "healthy" && body.state_entered_at !== undefined && Date.parse(body.state_entered_at) >= killedWall) return elapsed()
      }
      await sleep(10)
    }
    return null
  })()

  let failedCalls = 0
  const call = new Promise<number | null>((resolve) => {
    let pending = 0
    let done = false
    let n = 0
    const finish = (v: number | null) => {
      if (done) return
      done = true
      clearInterval(timer)
      resolve(v)
    }
    const attempt = () => {
      if (done) return
      if (performance.now() > limit) return finish(null)
      if (pending >= 20) return
      pending++
      const r = survivors[n++ % survivors.length]!
      r.http
        .post("/for_store/call_tool", { tool_name: "echo", service_name: SERVICE, args: { text: `f-${n}` }, timeout: 5 }, 6_000)
        .then((res) => {
          if (res.status === 200 && (res.body as { success?: boolean } | undefined)?.success === true) finish(elapsed())
          else if (!done) failedCalls++
        })
        .catch(() => {
          if (!done) failedCalls++
        })
        .finally(() => pending--)
    }
    const timer = setInterval(attempt, 20)
    attempt()
  })

  const [leaseMs, healthyMs, callMs] = await Promise.all([lease, healthy, call])
  return { leaseMs, healthyMs, callMs, failedCalls }
}

export const REPLICAS_START = "<!-- replicas: written by bench/replicas.ts -->"
export const REPLICAS_END = "<!-- /replicas -->"

const f = (v: number, digits = 2) => (Number.isFinite(v) ? v.toFixed(digits) : "-")

/** The "Replicas" section of bench/RESULTS.md, between its markers. */
export const replicasMarkdown = (r: ReplicasResult, git: string): string => {
  const base = r.throughput[0]
  const owner = r.latency.find((x) => x.way === "owner")
  const direct = r.latency.find((x) => x.way === "direct")
  const rounds = r.failover
  const col = (pick: (x: FailoverRound) => number | null) => rounds.map(pick).filter((v): v is number => v !== null)
  const med = (pick: (x: FailoverRound) => number | null) => (col(pick).length > 0 ? f(median(col(pick)), 0) : "-")
  const lines = [
    REPLICAS_START,
    "## Replicas",
    "",
    `bench/replicas.ts, ${r.date}, git ${git}, load ${r.load}; method in docs/performance.md ("Replicas"). One redis-server, ` +
      `store processes with \`--redis-url\` (the bundle), one Streamable HTTP fixture upstream as the store service \`${SERVICE}\`, all on 127.0.0.1.`,
    "",
    "### Throughput at c=32, the client rotating over the replicas",
    "",
    "| replicas | calls/s | vs 1 | p50 ms | p99 ms | forwarded | CPU/call, replicas together | Redis | upstream | errors |",
    "|---|---|---|---|---|---|---|---|---|---|",
    ...r.throughput.map(
      (x) =>
        `| ${x.replicas} | ${f(x.rate, 0)} | ${base ? f(x.rate / base.rate) : "-"}x | ${f(x.p50)} | ${f(x.p99)} | ${f(x.forwardedShare * 100, 0)} % | ` +
        `${f(x.replicasCpuUsPerCall, 0)} µs | ${f(x.redisCpuUsPerCall, 0)} µs | ${f(x.upstreamCpuUsPerCall, 0)} µs | ${x.errors} |`
    ),
    "",
    `${r.calls} measured calls per row after a warm-up, CPU time from /proc/<pid>/stat over warm-up and measured calls. ` +
      "All the replicas, Redis, the upstream and the load generator share one machine's cores, so more replicas cannot " +
      (r.ownership
        ? "add capacity here: what the rows show is the cost of forwarding (a forwarded call is two store hops, the " +
          "receiving replica's and the owner's), read in the CPU per call column."
        : "add capacity here. Without service leases no call is forwarded (each replica holds its own upstream session): " +
          "the rows show N replicas sharing the cores, not the cost of forwarding."),
    "",
    "### Latency of a forwarded call (c=1, interleaved)",
    "",
    "| way | p50 ms | p99 ms | mean ms | p50 vs owner | p99 vs owner | calls | errors |",
    "|---|---|---|---|---|---|---|---|",
    ...r.latency.map(
      (x) =>
        `| ${x.way === "direct" ? "direct SDK call to the upstream (floor)" : x.way === "owner" ? `call_tool on the owner${r.ownership ? "" : " (replica 1)"}` : r.ownership ? "call_tool on another replica (forwarded)" : "call_tool on replica 2 (not forwarded: no owner)"} | ` +
        `${f(x.p50, 3)} | ${f(x.p99, 3)} | ${f(x.mean, 3)} | ${owner ? f(x.p50 / owner.p50) : "-"}x | ${owner ? f(x.p99 / owner.p99) : "-"}x | ${x.count} | ${x.errors} |`
    ),
    "",
    owner && direct && r.ownership
      ? `Added by forwarding at p50: ${f((r.latency.find((x) => x.way === "forwarded")?.p50 ?? NaN) - owner.p50, 3)} ms; the store on the owner adds ${f(owner.p50 - direct.p50, 3)} ms over the direct call.`
      : "",
    "",
    `### Failover: SIGKILL of the service's owner (lease TTL ${r.leaseTtlMs} ms)`,
    ""
  ]
  if (rounds.length === 0) {
    lines.push("Not measured: see the notes.", "")
  } else {
    lines.push(
      "| round | lease moved | healthy on another replica | first call through a survivor | healthy minus TTL | calls failed before |",
      "|---|---|---|---|---|---|",
      ...rounds.map(
        (x) =>
          `| ${x.round} | ${x.leaseMs === null ? "-" : `${f(x.leaseMs, 0)} ms`} | ${x.healthyMs === null ? "-" : `${f(x.healthyMs, 0)} ms`} | ` +
          `${x.callMs === null ? "-" : `${f(x.callMs, 0)} ms`} | ${x.healthyMs === null ? "-" : `${f(x.healthyMs - r.leaseTtlMs, 0)} ms`} | ${x.failedCalls} |`
      ),
      `| median | ${med((x) => x.leaseMs)} ms | ${med((x) => x.healthyMs)} ms | ${med((x) => x.callMs)} ms | ${med((x) => (x.healthyMs === null ? null : x.healthyMs - r.leaseTtlMs))} ms | |`,
      "",
      "Times from the SIGKILL. The lease can only move once Redis expires the dead owner's key (up to one TTL after its " +
        "last renewal); the rest is the survivors noticing (their lease turn) and connecting to the upstream. \"-\": not seen within 30 s.",
      ""
    )
  }
  if (r.notes.length > 0) lines.push("Notes:", "", ...r.notes.map((n) => `- ${n}`), "")
  lines.push(REPLICAS_END)
  return lines.filter((l, i, all) => !(l === "" && all[i - 1] === "")).join("\n")
}

/** Writes the section into a results file (in place of the previous one, else at the end). */
export const writeReplicasSection = (file: string, section: string): void => writeMarkedSection(file, REPLICAS_START, REPLICAS_END, section)

/** Whether this machine can run the cell (Debian's redis-server installed). */
export const canRunReplicas = (): boolean => hasRedisServer

// Run alone: `npx tsx bench/replicas.ts [--write]`.
if (process.argv[1] !== undefined && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const { values } = parseArgs({ options: { write: { type: "boolean", default: false } }, strict: true })
  const env = process.env
  const quick = env["BENCH_QUICK"] === "1"
  const num = (name: string, full: number, fast: number) => (env[name] ? Number(env[name]) : quick ? fast : full)
  if (!hasRedisServer) {
    console.log("bench/replicas.ts: redis-server is not installed (apt-get install redis-server)")
    process.exit(1)
  }
  for (const signal of ["SIGINT", "SIGTERM"] as const) process.on(signal, () => void stopAll().finally(() => process.exit(130)))
  const dir = mkdtempSync(join(tmpdir(), "mcp-store-replicas-"))
  try {
    buildStore()
    const result = await runReplicas(dir, {
      calls: num("BENCH_CALLS", 2000, 200),
      warmup: num("BENCH_WARMUP", 300, 50),
      rounds: num("BENCH_FAILOVER_ROUNDS", 3, 1),
      log: (line) => console.log(line)
    })
    const git = execFileSync("git", ["rev-parse", "--short", "HEAD"], { cwd: ROOT, encoding: "utf8" }).trim()
    const section = replicasMarkdown(result, git)
    console.log(`\n${section}`)
    if (values.write) {
      writeReplicasSection(join(ROOT, "bench", "RESULTS.md"), section)
      console.log("\nWritten: bench/RESULTS.md")
    }
  } finally {
    await stopAll()
    rmSync(dir, { recursive: true, force: true })
  }
}
