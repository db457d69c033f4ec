/**
 * Replicas on one Redis (docs/replicas.md): what a cluster of store processes costs and
 * how fast it recovers, on one machine, loopback only. A real redis-server (test/support/redis.ts)
 * and real store processes (the bundle, `--redis-url`, one MCPSTORE_SECRET_KEY for all), one
 * Streamable HTTP fixture upstream (bench/fixtures.ts) defined as the one store service `fx-http`.
 * One replica owns the service (it holds the lease `lease:store/fx-http` in Redis and runs the
 * upstream session); the others show its published views and forward each call to it over signed
 * internal HTTP (`POST /_cluster/v1/forward`, src/cluster/forward.ts):
 *
 * 1. throughput of call_tool at c=32 over 1, 2 and 3 replicas, the client rotating its requests over
 *    them (so (n-1)/n of the calls are forwarded, counted, not assumed), with the CPU time per call of
 *    the owner, of the other replicas, of Redis and of the upstream, over the measured calls only;
 * 2. a forwarded call (call_tool on a replica that does not own the service) against call_tool on
 *    the owner and a direct MCP SDK call to the upstream (the floor): latency at c=1, the three
 *    interleaved one call at a time; then CPU time per call of each way, in blocks of calls per way
 *    in a rotating order (the owner, the receiving replica, Redis, the upstream, the client);
 * 3. propagation: a restart of the service on the owner, and on another replica `wait_service` for
 *    a status other than healthy, then for healthy; each wait's end against the owner's transition
 *    time (`at` of service_status `transitions`);
 * 4. failover: SIGKILL the owner (the holder of the lease), time until the lease is held by another
 *    replica (and how long after the dead owner's key expired in Redis), until a surviving replica
 *    shows the service healthy in a state entered after the kill, and until a call through a
 *    surviving replica succeeds; several rounds, a replica started again after each to keep three.
 *
 *   npx tsx bench/replicas.ts [--write]   (BENCH_QUICK, BENCH_CALLS, BENCH_WARMUP as in run.ts;
 *                                          BENCH_FAILOVER_ROUNDS, default 3; BENCH_PROPAGATION_ROUNDS,
 *                                          default 5; --write: the "Replicas" section of
 *                                          bench/RESULTS.md; --json <file>: the raw figures)
 */
import { execFileSync } from "node:child_process"
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { loadavg, tmpdir } from "node:os"
import { join, resolve } from "node:path"
import { fileURLToPath } from "node:url"
import { parseArgs } from "node:util"
import { createClient } from "redis"
import { clusterKey } from "../src/redis/key-names.js"
import { STATUSES } from "../src/domain/service-definition.js"
import { hasRedisServer, startRedisServer, type RedisServer } from "../test/support/redis.js"
import { directClient, storeCallerFor } from "./calls.js"
import { HttpClient, closedLoop, countAbortListenerWarnings, summarize, type Latencies } from "./load.js"
import { ROOT, buildStore, cpuSeconds, onCleanup, startFixtures, startStore, stopAll, stopChild, trackPid, type StoreProcess } from "./procs.js"
import { writeMarkedSection } from "./report.js"

/** The one service of the cluster; the name calls.ts's callers use for the HTTP fixture. */
const SERVICE = "fx-http"
const CLUSTER = "bench"
/** Redis's lease key of the store service (src/cluster/leases.ts: `lease:<scope>/<name>`). */
const LEASE_KEY = clusterKey(CLUSTER, "lease", `store/${SERVICE}`)
/** Replica mode requires one MCPSTORE_SECRET_KEY on every replica (it encrypts the shared OAuth tokens). */
const SECRET_KEY = "bench-replicas-shared-secret-0123456789"
/** The default lease time to live of `--lease-ms`, which the benchmark does not change. */
export const LEASE_TTL_MS = 5_000
/** Calls per block of the CPU-per-way measurement (cell 2). */
const CPU_BLOCK = 100

export interface ThroughputRow {
  readonly replicas: number
  readonly rate: number
  readonly p50: number
  readonly p99: number
  readonly errors: number
  readonly firstError: string | null
  /** CPU time per measured call (µs) of every replica together, then of the owner and of the others. */
  readonly replicasCpuUsPerCall: number
  readonly ownerCpuUsPerCall: number
  readonly othersCpuUsPerCall: number
  readonly redisCpuUsPerCall: number
  readonly upstreamCpuUsPerCall: number
  /** Share of the measured calls sent to a replica that does not own the service (so forwarded). */
  readonly forwardedShare: number
  /** False when the lease holder was not the same before and after the row (the shares are then not exact). */
  readonly ownerStable: boolean
}

export type LatencyWay = "direct" | "owner" | "forwarded"
export interface LatencyRow extends Latencies {
  readonly way: LatencyWay
  readonly errors: number
}

/** CPU time per call (µs) of one way at c=1, each process separately. */
export interface WayCpu {
  readonly way: LatencyWay
  readonly calls: number
  /** The replica that owns the service. */
  readonly ownerUs: number
  /** The replica that receives the forwarded calls (idle for the other ways: its background only). */
  readonly receiverUs: number
  readonly redisUs: number
  readonly upstreamUs: number
  /** This process: the HTTP client (store ways) or the MCP SDK client (direct). */
  readonly clientUs: number
  /** Mean latency of the calls of the blocks (ms). */
  readonly meanMs: number
}

/** One restart seen from another replica (cell 3); times in ms, null when not seen. */
export interface PropagationRound {
  readonly round: number
  /** From the owner's transition out of healthy to the end of the wait for it on the other replica. */
  readonly leftMs: number | null
  /** From the owner's transition to healthy to the end of the wait for it on the other replica. */
  readonly healthyMs: number | null
  /** The owner's time from leaving healthy to healthy again (the reconnection). */
  readonly reconnectMs: number | null
  /** False when the wait for healthy was sent after the owner's transition (then `healthyMs` is an upper bound). */
  readonly healthyWaitEarly: boolean
  readonly error?: string | undefined
}

export interface FailoverRound {
  readonly round: number
  /** Time to live of the dead owner's lease key at the kill (ms): when Redis lets it go. */
  readonly expiresInMs: number | null
  /** From the SIGKILL to the lease held by another replica (ms); null when not seen in time. */
  readonly leaseMs: number | null
  /** From the SIGKILL to a surviving replica showing the service healthy, entered after the kill (ms). */
  readonly healthyMs: number | null
  /** From the SIGKILL to the first successful call_tool through a surviving replica (ms). */
  readonly callMs: number | null
  /** Calls that failed through the survivors before that one. */
  readonly failedCalls: number
  /** The first failure's message (what a client sees meanwhile). */
  readonly firstFailure: string | null
  /** The statuses the survivors showed for the service between the kill and the lease moving. */
  readonly shownMeanwhile: ReadonlyArray<string>
}

export interface ReplicasResult {
  readonly date: string
  readonly load: string
  readonly calls: number
  readonly leaseTtlMs: number
  readonly throughput: ReadonlyArray<ThroughputRow>
  readonly latency: ReadonlyArray<LatencyRow>
  readonly cpu: ReadonlyArray<WayCpu>
  readonly propagation: ReadonlyArray<PropagationRound>
  readonly failover: ReadonlyArray<FailoverRound>
  readonly notes: ReadonlyArray<string>
}

export interface ReplicasOptions {
  readonly calls: number
  readonly warmup: number
  readonly rounds: number
  /** Restarts watched from another replica (cell 3); default 5. */
  readonly propagationRounds?: number
  readonly log: (line: string) => void
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms))
/** Wall-clock time with a fraction of a millisecond (the store's transition times are `Date.now()`). */
const wallNow = () => performance.timeOrigin + performance.now()

/** A replica: the store process and a keep-alive client to it. */
interface Replica {
  readonly store: StoreProcess
  readonly http: HttpClient
  readonly dir: string
}

const median = (values: ReadonlyArray<number>): number => summarize(values).p50

/** Runs the cells; every process it starts is ended before it resolves (and by `stopAll` on error). */
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
    const store = await startStore(configFile, {
      name: `replica ${serial}`,
      args: ["--redis-url", redis.url, "--cluster-name", CLUSTER],
      env: { MCPSTORE_SECRET_KEY: SECRET_KEY }
    })
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
  // A replica id is `<host>-<pid>-<random>` (src/cluster/cluster.ts).
  const byHolder = (id: string | null) => (id === null ? undefined : replicas.find((r) => id.includes(`-${r.store.child.pid}-`)))
  /** The replica holding the lease now; throws when none of ours does. */
  const currentOwner = async (): Promise<{ id: string; owner: Replica }> => {
    const id = await holder()
    const owner = byHolder(id)
    if (id === null || owner === undefined) throw new Error(`the lease ${LEASE_KEY} is held by ${String(id)}, not by one of the replicas started here`)
    return { id, owner }
  }

  try {
    // 1. Throughput at c=32 over 1, 2, 3 replicas, a replica added before each step.
    const throughput: ThroughputRow[] = []
    for (let n = 1; n <= 3; n++) {
      replicas.push(await startReplica())
      const { id: ownerId, owner } = await currentOwner()
      const ownerIndex = replicas.indexOf(owner)
      const callers = replicas.map((r) => storeCallerFor(r.http, "http"))
      const pids = replicas.map((r) => r.store.child.pid)
      // The first row also warms the upstream and Redis (their first calls): a longer warm-up.
      const warmup = n === 1 ? Math.max(options.warmup, 1000) : options.warmup
      await closedLoop((i) => callers[i % n]!(`w${n}-${i}`), { concurrency: 32, calls: warmup, warmup: 0, maxSeconds: 30 })
      let sent = 0
      let forwarded = 0
      const before = { replicas: pids.map(cpuSeconds), redis: cpuSeconds(redis.pid()), upstream: cpuSeconds(fixtures.child.pid) }
      const run = await closedLoop(
        (i) => {
          sent++
          if (i % n !== ownerIndex) forwarded++
          return callers[i % n]!(`t${n}-${i}`)
        },
        { concurrency: 32, calls: options.calls, warmup: 0, maxSeconds: 30 }
      )
      const after = { replicas: pids.map(cpuSeconds), redis: cpuSeconds(redis.pid()), upstream: cpuSeconds(fixtures.child.pid) }
      const ownerStable = (await holder()) === ownerId
      const perCall = (seconds: number) => (seconds * 1e6) / Math.max(1, sent)
      const replicaCpu = pids.map((_, k) => after.replicas[k]! - before.replicas[k]!)
      const row: ThroughputRow = {
        replicas: n,
        rate: run.rate,
        p50: run.p50,
        p99: run.p99,
        errors: run.errors,
        firstError: run.firstError,
        replicasCpuUsPerCall: perCall(replicaCpu.reduce((a, b) => a + b, 0)),
        ownerCpuUsPerCall: perCall(replicaCpu[ownerIndex]!),
        othersCpuUsPerCall: perCall(replicaCpu.reduce((a, b, k) => (k === ownerIndex ? a : a + b), 0)),
        redisCpuUsPerCall: perCall(after.redis - before.redis),
        upstreamCpuUsPerCall: perCall(after.upstream - before.upstream),
        forwardedShare: forwarded / Math.max(1, sent),
        ownerStable
      }
      if (!ownerStable) notes.push(`Throughput over ${n} replica(s): the lease of ${SERVICE} moved during the row; its forwarded share and owner CPU are not exact.`)
      throughput.push(row)
      log(
        `  c=32 over ${n} replica(s): ${row.rate.toFixed(0).padStart(6)} calls/s  p50 ${row.p50.toFixed(2)} p99 ${row.p99.toFixed(2)} ms  ` +
          `forwarded ${(row.forwardedShare * 100).toFixed(0)} %  CPU/call: owner ${row.ownerCpuUsPerCall.toFixed(0)} µs, others ${row.othersCpuUsPerCall.toFixed(0)} µs, ` +
          `Redis ${row.redisCpuUsPerCall.toFixed(0)} µs, upstream ${row.upstreamCpuUsPerCall.toFixed(0)} µs` +
          (run.errors > 0 ? `  ${run.errors} errors: ${run.firstError}` : "") +
          (run.cut ? "  (cut by the time limit)" : "")
      )
    }

    // 2. Forwarded vs on the owner vs direct.
    const { owner } = await currentOwner()
    const other = replicas.find((r) => r !== owner)!
    const ways: Record<LatencyWay, (text: string) => Promise<void>> = {
      direct: direct.call,
      owner: storeCallerFor(owner.http, "http"),
      forwarded: storeCallerFor(other.http, "http")
    }
    const order: ReadonlyArray<LatencyWay> = ["direct", "owner", "forwarded"]
    // 2a. Latency, interleaved one call at a time (c=1).
    const samples: Record<LatencyWay, number[]> = { direct: [], owner: [], forwarded: [] }
    const errors: Record<LatencyWay, number> = { direct: 0, owner: 0, forwarded: 0 }
    const perWay = Math.min(options.calls, 1000)
    const latencyDeadline = performance.now() + 60_000
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
    // 2b. CPU per call of each way (c=1): blocks of CPU_BLOCK calls of one way, the ways in a rotating order.
    const cpu = await cpuPerWay(ways, order, {
      blocks: Math.max(1, Math.round(perWay / CPU_BLOCK)),
      pids: { owner: owner.store.child.pid, receiver: other.store.child.pid, redis: redis.pid(), upstream: fixtures.child.pid },
      deadlineMs: 60_000
    })
    for (const c of cpu) {
      log(
        `  c=1 ${c.way.padEnd(9)} CPU/call: owner ${c.ownerUs.toFixed(0)} µs, receiving replica ${c.receiverUs.toFixed(0)} µs, Redis ${c.redisUs.toFixed(0)} µs, ` +
          `upstream ${c.upstreamUs.toFixed(0)} µs, client ${c.clientUs.toFixed(0)} µs (${c.calls} calls, mean ${c.meanMs.toFixed(2)} ms)`
      )
    }

    // 3. A restart on the owner, waited for on another replica.
    const propagation: PropagationRound[] = []
    for (let round = 1; round <= (options.propagationRounds ?? 5); round++) {
      const { owner: o } = await currentOwner()
      const p = await propagationRound(o, replicas.find((r) => r !== o)!)
      propagation.push({ round, ...p })
      log(
        `  restart ${round}: on another replica, left healthy ${fmtMs(p.leftMs, 1)} and healthy again ${fmtMs(p.healthyMs, 1)}${p.healthyWaitEarly ? "" : " (upper bound)"} ` +
          `after the owner's transitions; the owner reconnected in ${fmtMs(p.reconnectMs, 0)}${p.error ? `; ${p.error}` : ""}`
      )
      await sleep(200)
    }

    // 4. Failover: SIGKILL the owner, then a replica started again to keep three.
    const failover: FailoverRound[] = []
    for (let round = 1; round <= options.rounds; round++) {
      const id = await holder()
      const victim = byHolder(id)
      if (id === null || victim === undefined) {
        notes.push(`Failover round ${round}: no replica started here held the lease of ${SERVICE} before the kill (holder: ${String(id)}); rounds stopped.`)
        break
      }
      const survivors = replicas.filter((r) => r !== victim)
      const result = await failoverRound(victim, survivors, id, holder, () => client.pTTL(LEASE_KEY))
      failover.push({ round, ...result })
      log(
        `  failover ${round}: key expiring in ${fmtMs(result.expiresInMs, 0)}, lease moved ${fmtMs(result.leaseMs, 0)}, healthy elsewhere ${fmtMs(result.healthyMs, 0)}, ` +
          `first call through a survivor ${fmtMs(result.callMs, 0)} (${result.failedCalls} failed before${result.firstFailure ? `: ${result.firstFailure}` : ""}); ` +
          `shown meanwhile: ${result.shownMeanwhile.join(", ") || "-"}`
      )
      replicas.splice(replicas.indexOf(victim), 1)
      victim.http.close()
      await stopChild(victim.store.child) // reaps it (and anything left in its group)
      replicas.push(await startReplica())
    }
    return {
      date: new Date().toISOString(),
      load: loadavg().map((l) => l.toFixed(2)).join(", "),
      calls: options.calls,
      leaseTtlMs: LEASE_TTL_MS,
      throughput,
      latency,
      cpu,
      propagation,
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

const fmtMs = (v: number | null, digits: number) => (v === null ? "not seen" : `${v.toFixed(digits)} ms`)

/**
 * CPU time per call of each way at c=1: `blocks` rounds, each one block of `CPU_BLOCK` calls per
 * way, the ways in a rotating order; the CPU time of each process (/proc, 10 ms ticks; this process:
 * `process.cpuUsage`) read around each block and summed per way. Background work (health checks,
 * the cluster's keeper) falls into whichever block runs: it is what the receiving replica shows in
 * the ways that do not use it.
 */
const cpuPerWay = async (
  ways: Record<LatencyWay, (text: string) => Promise<void>>,
  order: ReadonlyArray<LatencyWay>,
  options: { blocks: number; pids: { owner: number; receiver: number; redis: number; upstream: number }; deadlineMs: number }
): Promise<WayCpu[]> => {
  const zero = () => ({ calls: 0, owner: 0, receiver: 0, redis: 0, upstream: 0, client: 0, ms: 0 })
  const sums: Record<LatencyWay, ReturnType<typeof zero>> = { direct: zero(), owner: zero(), forwarded: zero() }
  const read = () => ({
    owner: cpuSeconds(options.pids.owner),
    receiver: cpuSeconds(options.pids.receiver),
    redis: cpuSeconds(options.pids.redis),
    upstream: cpuSeconds(options.pids.upstream),
    client: (() => {
      const u = process.cpuUsage()
      return (u.user + u.system) / 1e6
    })()
  })
  const deadline = performance.now() + options.deadlineMs
  for (let b = 0; b < options.blocks && performance.now() < deadline; b++) {
    for (let k = 0; k < order.length; k++) {
      const way = order[(k + b) % order.length]!
      const call = ways[way]
      const before = read()
      const t0 = performance.now()
      let calls = 0
      for (let i = 0; i < CPU_BLOCK; i++) {
        await call(`c-${way}-${b}-${i}`).then(
          () => calls++,
          () => undefined
        )
      }
      const ms = performance.now() - t0
      const after = read()
      const s = sums[way]
      s.calls += calls
      s.ms += ms
      s.owner += after.owner - before.owner
      s.receiver += after.receiver - before.receiver
      s.redis += after.redis - before.redis
      s.upstream += after.upstream - before.upstream
      s.client += after.client - before.client
    }
  }
  return order.map((way) => {
    const s = sums[way]
    const us = (seconds: number) => (seconds * 1e6) / Math.max(1, s.calls)
    return {
      way,
      calls: s.calls,
      ownerUs: us(s.owner),
      receiverUs: us(s.receiver),
      redisUs: us(s.redis),
      upstreamUs: us(s.upstream),
      clientUs: us(s.client),
      meanMs: s.ms / Math.max(1, s.calls)
    }
  })
}

/** The statuses other than healthy: the first wait of a propagation round. */
const NOT_HEALTHY = STATUSES.filter((s) => s !== "healthy")

/**
 * One restart of the service on `owner` (POST restart_service), watched on `mirror`: a wait for any
 * status other than healthy is sent first (and given 100 ms to be registered), then, as soon as it
 * ends, a wait for healthy. Each wait's end (the answer's arrival here, so an upper bound by one
 * loopback answer) is compared with the owner's transition time (`at` in its service_status
 * `transitions`, whole milliseconds, same clock).
 */
const propagationRound = async (owner: Replica, mirror: Replica): Promise<Omit<PropagationRound, "round">> => {
  const waitFor = async (status: string | ReadonlyArray<string>) => {
    const res = await mirror.http.post("/for_store/wait_service", { client_id_or_service_name: SERVICE, status, timeout: 10 }, 15_000)
    const at = wallNow()
    const ok = (res.body as { data?: { result?: boolean } } | undefined)?.data?.result === true
    return { at, ok, text: res.text }
  }
  const leaving = waitFor(NOT_HEALTHY)
  await sleep(100)
  const restartSent = Math.floor(wallNow())
  const restarted = await owner.http.post("/for_store/restart_service", { service_name: SERVICE }, 15_000)
  if (restarted.status !== 200) {
    await leaving
    return { leftMs: null, healthyMs: null, reconnectMs: null, healthyWaitEarly: false, error: `restart_service: HTTP ${restarted.status} ${restarted.text.slice(0, 200)}` }
  }
  const left = await leaving
  const healthyWaitSent = wallNow()
  const back = await waitFor("healthy")
  const status = await owner.http.get(`/for_store/service_status/${SERVICE}`, 5_000)
  const transitions = ((status.body as { transitions?: Array<{ from: string; to: string; at: string }> } | undefined)?.transitions ?? []).map((t) => ({
    ...t,
    ms: Date.parse(t.at)
  }))
  const out = transitions.find((t) => t.ms >= restartSent && t.from === "healthy" && t.to !== "healthy")
  const inn = out === undefined ? undefined : transitions.find((t) => t.ms >= out.ms && t !== out && t.to === "healthy")
  const error = !left.ok ? `the wait for leaving healthy did not end: ${left.text.slice(0, 200)}` : !back.ok ? `the wait for healthy did not end: ${back.text.slice(0, 200)}` : undefined
  return {
    leftMs: out === undefined || !left.ok ? null : left.at - out.ms,
    healthyMs: inn === undefined || !back.ok ? null : back.at - inn.ms,
    reconnectMs: out === undefined || inn === undefined ? null : inn.ms - out.ms,
    healthyWaitEarly: inn !== undefined && healthyWaitSent < inn.ms,
    error: error ?? (out === undefined || inn === undefined ? `the owner's transitions out of and back to healthy were not found` : undefined)
  }
}

/**
 * One failover: read the lease key's time to live, SIGKILL `victim` and watch, at once, the lease
 * (Redis, every 5 ms), the service's status on the survivors (every 10 ms: healthy in a state
 * entered after the kill) and calls through the survivors (a new one every 20 ms, at most 20
 * pending); each probe stops at its first success or after 30 s.
 */
const failoverRound = async (
  victim: Replica,
  survivors: ReadonlyArray<Replica>,
  victimId: string,
  holder: () => Promise<string | null>,
  leaseTtl: () => Promise<number>
): Promise<Omit<FailoverRound, "round">> => {
  const ttl = await leaseTtl().catch(() => -1)
  const killedWall = Date.now()
  const killedAt = performance.now()
  process.kill(victim.store.child.pid, "SIGKILL")
  const expiresInMs = ttl >= 0 ? Math.max(0, ttl - (performance.now() - killedAt)) : null
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

  const shown: Array<{ readonly status: string; readonly ms: number }> = []
  const healthy = (async () => {
    while (performance.now() < limit) {
      for (const r of survivors) {
        const res = await r.http.get(`/for_store/service_status/${SERVICE}`, 2_000).catch(() => undefined)
        const body = res?.body as { status?: string; state_entered_at?: string } | undefined
        if (body?.status === "healthy" && body.state_entered_at !== undefined && Date.parse(body.state_entered_at) >= killedWall) return elapsed()
        if (body?.status !== undefined) shown.push({ status: body.status, ms: elapsed() })
      }
      await sleep(10)
    }
    return null
  })()

  let failedCalls = 0
  let firstFailure: string | null = null
  const failed = (why: string) => {
    failedCalls++
    firstFailure ??= why.slice(0, 200)
  }
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
          else if (!done) {
            const body = res.body as { error?: { code?: string; message?: string }; message?: string } | undefined
            failed(`HTTP ${res.status} ${body?.error?.code ?? ""} ${body?.error?.message ?? body?.message ?? res.text}`.replace(/\s+/g, " "))
          }
        })
        .catch((e: unknown) => {
          if (!done) failed(e instanceof Error ? e.message : String(e))
        })
        .finally(() => pending--)
    }
    const timer = setInterval(attempt, 20)
    attempt()
  })

  const [leaseMs, healthyMs, callMs] = await Promise.all([lease, healthy, call])
  const shownMeanwhile = [...new Set(shown.filter((x) => leaseMs === null || x.ms < leaseMs).map((x) => x.status))]
  return { expiresInMs, leaseMs, healthyMs, callMs, failedCalls, firstFailure, shownMeanwhile }
}

export const REPLICAS_START = "<!-- replicas: written by bench/replicas.ts -->"
export const REPLICAS_END = "<!-- /replicas -->"

const f = (v: number, digits = 2) => (Number.isFinite(v) ? v.toFixed(digits) : "-")
const ms = (v: number | null, digits = 0) => (v === null ? "-" : `${f(v, digits)} ms`)

const WAY_LABEL: Record<LatencyWay, string> = {
  direct: "direct SDK call to the upstream (floor)",
  owner: "call_tool on the owner",
  forwarded: "call_tool on another replica (forwarded)"
}

/** The "Replicas" section of bench/RESULTS.md, between its markers. */
export const replicasMarkdown = (r: ReplicasResult, git: string): string => {
  const base = r.throughput[0]
  const lat = (way: LatencyWay) => r.latency.find((x) => x.way === way)
  const cpuOf = (way: LatencyWay) => r.cpu.find((x) => x.way === way)
  const [owner, direct, forwarded] = [lat("owner"), lat("direct"), lat("forwarded")]
  const [cOwner, cDirect, cForwarded] = [cpuOf("owner"), cpuOf("direct"), cpuOf("forwarded")]
  const rounds = r.failover
  const col = <T>(list: ReadonlyArray<T>, pick: (x: T) => number | null) => list.map(pick).filter((v): v is number => v !== null)
  const med = <T>(list: ReadonlyArray<T>, pick: (x: T) => number | null, digits = 0) => (col(list, pick).length > 0 ? `${f(median(col(list, pick)), digits)} ms` : "-")
  const max = <T>(list: ReadonlyArray<T>, pick: (x: T) => number | null, digits = 0) => (col(list, pick).length > 0 ? `${f(Math.max(...col(list, pick)), digits)} ms` : "-")
  const after = (x: FailoverRound, v: number | null) => (v === null || x.expiresInMs === null ? null : v - x.expiresInMs)
  const lines = [
    REPLICAS_START,
    "## Replicas",
    "",
    `bench/replicas.ts, ${r.date}, git ${git}, load ${r.load}; method in docs/performance.md ("Replicas"). One redis-server, ` +
      `store processes with \`--redis-url\` (the bundle), one Streamable HTTP fixture upstream as the store service \`${SERVICE}\`, all on 127.0.0.1. ` +
      `One replica owns \`${SERVICE}\` (its lease in Redis) and holds the one upstream session; the others forward its calls to it (\`POST /_cluster/v1/forward\`).`,
    "",
    "### Throughput at c=32, the client rotating over the replicas",
    "",
    "| replicas | calls/s | vs 1 | p50 ms | p99 ms | forwarded | CPU/call, replicas together | owner | other replicas | Redis | upstream | errors |",
    "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ...r.throughput.map(
      (x) =>
        `| ${x.replicas} | ${f(x.rate, 0)} | ${base ? f(x.rate / base.rate) : "-"}x | ${f(x.p50)} | ${f(x.p99)} | ${f(x.forwardedShare * 100, 0)} %${x.ownerStable ? "" : " (owner moved)"} | ` +
        `${f(x.replicasCpuUsPerCall, 0)} µs | ${f(x.ownerCpuUsPerCall, 0)} µs | ${f(x.othersCpuUsPerCall, 0)} µs | ${f(x.redisCpuUsPerCall, 0)} µs | ${f(x.upstreamCpuUsPerCall, 0)} µs | ${x.errors} |`
    ),
    "",
    `${r.calls} measured calls per row after a warm-up; CPU time from /proc/<pid>/stat over the measured calls, divided by all of them ` +
      "(so a forwarded call's cost on the receiving replica shows in \"other replicas\" at the forwarded share). " +
      "All the replicas, Redis, the upstream and the load generator share one machine's cores, so more replicas cannot add capacity here: " +
      "the rows show what forwarding costs (a forwarded call crosses two stores), read in the CPU per call columns, not scale-out."
  ]
  if (base !== undefined) {
    const extra = r.throughput
      .filter((x) => x.forwardedShare > 0)
      .map((x) => `${f((x.replicasCpuUsPerCall - base.replicasCpuUsPerCall) / x.forwardedShare, 0)} µs over ${x.replicas} replicas`)
    if (extra.length > 0) lines.push("", `Replica CPU added per forwarded call at c=32 (the row's excess over 1 replica, divided by its forwarded share): ${extra.join(", ")}.`)
  }
  lines.push(
    "",
    "### A forwarded call against a call on the owner and a direct call (c=1)",
    "",
    "Latency, the three ways interleaved one call at a time:",
    "",
    "| way | p50 ms | p99 ms | mean ms | p50 vs owner | p99 vs owner | calls | errors |",
    "|---|---|---|---|---|---|---|---|",
    ...r.latency.map(
      (x) =>
        `| ${WAY_LABEL[x.way]} | ${f(x.p50, 3)} | ${f(x.p99, 3)} | ${f(x.mean, 3)} | ${owner ? f(x.p50 / owner.p50) : "-"}x | ${owner ? f(x.p99 / owner.p99) : "-"}x | ${x.count} | ${x.errors} |`
    ),
    "",
    `CPU time per call, blocks of ${CPU_BLOCK} calls of one way in a rotating order (the receiving replica is the one the forwarded calls go to; in the other ways it only runs its background work):`,
    "",
    "| way | owner | receiving replica | both replicas | Redis | upstream | client (this process) | mean ms | calls |",
    "|---|---|---|---|---|---|---|---|---|",
    ...r.cpu.map(
      (x) =>
        `| ${WAY_LABEL[x.way]} | ${f(x.ownerUs, 0)} µs | ${f(x.receiverUs, 0)} µs | ${f(x.ownerUs + x.receiverUs, 0)} µs | ${f(x.redisUs, 0)} µs | ${f(x.upstreamUs, 0)} µs | ${f(x.clientUs, 0)} µs | ${f(x.meanMs)} | ${x.calls} |`
    ),
    ""
  )
  if (owner && direct && forwarded && cOwner && cForwarded && cDirect) {
    const both = (x: WayCpu) => x.ownerUs + x.receiverUs
    lines.push(
      `Forwarding against calling the upstream from the receiving replica ("Remote (URL) services may instead be called directly by the receiving replica when that is faster; measure and choose"). ` +
        `This build forwards every call to the owner (one upstream session per service). Forwarding adds ${f(forwarded.p50 - owner.p50, 2)} ms at p50 and ${f(forwarded.p99 - owner.p99, 2)} ms at p99 ` +
        `over the same call made on the owner (${f(forwarded.p50, 2)} against ${f(owner.p50, 2)} ms at p50), and ${f(both(cForwarded) - both(cOwner), 0)} µs of replica CPU per call ` +
        `(${f(both(cForwarded), 0)} against ${f(both(cOwner), 0)} µs, both replicas counted); the store on the owner adds ${f(owner.p50 - direct.p50, 2)} ms at p50 over the direct SDK call ` +
        `(in replica mode that includes writing the call's record to Redis and reading it back before the answer). ` +
        `A receiving replica calling a URL service itself would cost about what the call on the owner costs (an estimate: not built, so not measured), at the price of one more upstream session per replica and service.`,
      ""
    )
    lines.push(
      `In the calls on the owner, the receiving replica takes no part in the call and still spends ${f(cOwner.receiverUs, 0)} µs per call, against ${f(cDirect.receiverUs, 0)} µs ` +
        `while the calls bypass the store (its background work alone): every replica reads every call's record from the cluster's records stream (src/records/redis-records.ts), so each call costs each other replica about ` +
        `${f(cOwner.receiverUs - cDirect.receiverUs, 0)} µs, and Redis ${f(cOwner.redisUs - cDirect.redisUs, 0)} µs (the record's write script and every replica's reads).`,
      ""
    )
  }
  lines.push("### A wait on another replica against the owner's transition", "")
  if (r.propagation.length === 0) lines.push("Not measured.", "")
  else {
    lines.push(
      "| round | left healthy (wait on another replica ends after the owner's transition) | healthy again | owner's reconnection |",
      "|---|---|---|---|",
      ...r.propagation.map(
        (x) => `| ${x.round} | ${ms(x.leftMs, 1)} | ${ms(x.healthyMs, 1)}${x.healthyMs !== null && !x.healthyWaitEarly ? " (upper bound)" : ""} | ${ms(x.reconnectMs, 0)} |`
      ),
      `| median | ${med(r.propagation, (x) => x.leftMs, 1)} | ${med(r.propagation, (x) => x.healthyMs, 1)} | ${med(r.propagation, (x) => x.reconnectMs, 0)} |`,
      `| max | ${max(r.propagation, (x) => x.leftMs, 1)} | ${max(r.propagation, (x) => x.healthyMs, 1)} | ${max(r.propagation, (x) => x.reconnectMs, 0)} |`,
      "",
      "POST restart_service on the owner; on another replica, wait_service for any status other than healthy (sent before the restart), then for healthy. " +
        "Times from the owner's transition (`at` in its service_status transitions, whole milliseconds) to the wait's answer arriving here (so they include one loopback answer); the issue's target is 50 ms.",
      ""
    )
    for (const x of r.propagation) if (x.error) lines.push(`Round ${x.round}: ${x.error}.`, "")
  }
  lines.push(`### Failover: SIGKILL of the service's owner (lease TTL ${r.leaseTtlMs} ms)`, "")
  if (rounds.length === 0) {
    lines.push("Not measured: see the notes.", "")
  } else {
    lines.push(
      "| round | lease key expires | lease moved | healthy on another replica | first call through a survivor | lease moved after expiry | call after expiry | calls failed before |",
      "|---|---|---|---|---|---|---|---|",
      ...rounds.map(
        (x) =>
          `| ${x.round} | ${ms(x.expiresInMs)} | ${ms(x.leaseMs)} | ${ms(x.healthyMs)} | ${ms(x.callMs)} | ${ms(after(x, x.leaseMs))} | ${ms(after(x, x.callMs))} | ${x.failedCalls} |`
      ),
      `| median | ${med(rounds, (x) => x.expiresInMs)} | ${med(rounds, (x) => x.leaseMs)} | ${med(rounds, (x) => x.healthyMs)} | ${med(rounds, (x) => x.callMs)} | ` +
        `${med(rounds, (x) => after(x, x.leaseMs))} | ${med(rounds, (x) => after(x, x.callMs))} | |`,
      "",
      "Times from the SIGKILL. The lease can only move once Redis expires the dead owner's key (\"lease key expires\": its time to live read just before the kill, " +
        "at most one TTL after its last renewal); the rest (\"after expiry\") is a survivor's next lease turn (every TTL/3) and its connection to the upstream. \"-\": not seen within 30 s.",
      ""
    )
    const failure = rounds.find((x) => x.firstFailure !== null)?.firstFailure
    const shown = [...new Set(rounds.flatMap((x) => x.shownMeanwhile))]
    if (failure || shown.length > 0) {
      lines.push(
        `Until the lease moves${shown.length > 0 ? ` the survivors show the service as ${shown.join(", ")} (the dead owner's last view)` : ""}` +
          `${failure ? `, and a call through them fails (${f(median(rounds.map((x) => x.failedCalls)), 0)} failed calls per round, one attempt every 20 ms); the first failure seen: \`${failure.replace(/`/g, "'")}\`` : ""}.`,
        ""
      )
    }
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
  const { values } = parseArgs({ options: { write: { type: "boolean", default: false }, json: { type: "string" } }, strict: true })
  const env = process.env
  const quick = env["BENCH_QUICK"] === "1"
  const num = (name: string, full: number, fast: number) => (env[name] ? Number(env[name]) : quick ? fast : full)
  if (!hasRedisServer) {
    console.log("bench/replicas.ts: redis-server is not installed (apt-get install redis-server)")
    process.exit(1)
  }
  for (const signal of ["SIGINT", "SIGTERM"] as const) process.on(signal, () => void stopAll().finally(() => process.exit(130)))
  // The direct MCP SDK client's abort-listener warnings (`countAbortListenerWarnings`): counted, not printed.
  const abortListenerWarnings = countAbortListenerWarnings()
  const dir = mkdtempSync(join(tmpdir(), "mcp-store-replicas-"))
  try {
    buildStore()
    const measured = await runReplicas(dir, {
      calls: num("BENCH_CALLS", 2000, 200),
      warmup: num("BENCH_WARMUP", 300, 50),
      rounds: num("BENCH_FAILOVER_ROUNDS", 3, 1),
      propagationRounds: num("BENCH_PROPAGATION_ROUNDS", 5, 3),
      log: (line) => console.log(line)
    })
    const result: ReplicasResult =
      abortListenerWarnings() === 0
        ? measured
        : {
            ...measured,
            notes: [
              ...measured.notes,
              `The direct SDK client (in the benchmark's process) drew ${abortListenerWarnings()} MaxListenersExceededWarnings (Node's fetch adds an abort listener per request to the SDK transport's one signal; see bench/run.ts): counted, not printed.`
            ]
          }
    const git = execFileSync("git", ["rev-parse", "--short", "HEAD"], { cwd: ROOT, encoding: "utf8" }).trim()
    if (values.json !== undefined) writeFileSync(values.json, JSON.stringify({ git, result }, null, 2))
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
