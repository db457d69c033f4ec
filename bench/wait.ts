/**
 * wait_service reaction: how long after a service's status changes the `wait_service` call waiting
 * for that status is answered. One service on the Streamable HTTP fixture is driven round a cycle:
 * waits for `disconnected` are sent, then `disconnect_service`; waits for `healthy`, then
 * `restart_service`. Reaction = the moment the bench receives the wait's answer minus the moment
 * of the transition as the store recorded it (`service_status` transitions, `Date.now()` in the
 * store, whole milliseconds, so figures are high by 0 to 1 ms). Both clocks are the same system
 * clock; the bench reads it as `performance.timeOrigin + performance.now()` corrected to Date.now().
 */
import { mkdirSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { HttpClient, summarize, type Latencies } from "./load.js"
import { startStore, stopChild } from "./procs.js"

export interface WaitResult {
  /** One waiter per status change. */
  readonly single: Latencies
  /** The same, by the status waited for. */
  readonly singleByStatus: Readonly<Record<"healthy" | "disconnected", Latencies>>
  /** `fanout` waiters on each status change. */
  readonly fanout: Latencies
  readonly fanoutWaiters: number
  /** Waits that answered before the change (the wait was not yet registered): left out. */
  readonly early: number
  readonly failures: number
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

/** Wall-clock milliseconds with sub-millisecond resolution, aligned to Date.now(). */
const makeWallClock = () => {
  let best = Number.POSITIVE_INFINITY
  let offset = 0
  // Date.now() is floor(wall); the offset that makes hi-res >= Date.now() everywhere is the smallest one.
  for (let i = 0; i < 20_000; i++) {
    const hi = performance.timeOrigin + performance.now()
    const d = Date.now() - hi
    if (d < best) best = d
  }
  offset = best + 0.5
  return () => performance.timeOrigin + performance.now() + offset
}

export const runWait = async (
  dir: string,
  httpUrl: string,
  options: { cycles: number; fanoutCycles: number; fanoutWaiters: number; log: (line: string) => void }
): Promise<WaitResult> => {
  mkdirSync(dir, { recursive: true })
  const configFile = join(dir, "mcp.json")
  writeFileSync(configFile, JSON.stringify({ mcpServers: { w: { url: httpUrl } } }, null, 2))
  const store = await startStore(configFile, { name: "store (wait_service)" })
  const http = new HttpClient(store.url, options.fanoutWaiters + 8)
  const wall = makeWallClock()
  const single: number[] = []
  const fanout: number[] = []
  const byStatus = { healthy: [] as number[], disconnected: [] as number[] }
  let early = 0
  let failures = 0
  try {
    const healthy = await http.post("/for_store/wait_service", { client_id_or_service_name: "w", status: "healthy", timeout: 30 }, 35_000)
    if ((healthy.body as { data?: { result?: boolean } }).data?.result !== true) throw new Error(`wait: service not healthy: ${JSON.stringify(healthy.body)}`)

    const transitionAt = async (to: string): Promise<number> => {
      const res = await http.get("/for_store/service_status/w")
      const transitions = (res.body as { data?: { transitions?: Array<{ to: string; at: string }> }; transitions?: Array<{ to: string; at: string }> })
      const list = transitions.data?.transitions ?? transitions.transitions ?? []
      const last = [...list].reverse().find((t) => t.to === to)
      if (!last) throw new Error(`no transition to ${to} in ${JSON.stringify(res.body).slice(0, 300)}`)
      return Date.parse(last.at)
    }

    /** Sends `n` waits for `status`, lets them register, runs `change`, and returns each reaction. */
    const waitFor = async (status: string, n: number, change: () => Promise<unknown>): Promise<number[]> => {
      const received: Array<{ at: number; elapsed: number; ok: boolean }> = []
      const waits = Array.from({ length: n }, () =>
        http.post("/for_store/wait_service", { client_id_or_service_name: "w", status, timeout: 10 }, 15_000).then((res) => {
          const at = wall()
          const data = (res.body as { data?: { result?: boolean; elapsed_ms?: number } }).data
          received.push({ at, elapsed: data?.elapsed_ms ?? 0, ok: data?.result === true })
        })
      )
      await sleep(25 + n) // the waits reach the store and subscribe
      await change()
      await Promise.all(waits)
      const changedAt = await transitionAt(status)
      const out: number[] = []
      for (const r of received) {
        if (!r.ok) failures++
        else if (r.elapsed < 10) early++
        else out.push(r.at - changedAt)
      }
      return out
    }

    const cycle = async (n: number, into: number[]) => {
      const down = await waitFor("disconnected", n, () => http.post("/for_store/disconnect_service", { service_name: "w" }, 15_000))
      const up = await waitFor("healthy", n, () => http.post("/for_store/restart_service", { service_name: "w" }, 15_000))
      into.push(...down, ...up)
      if (n === 1) {
        byStatus.disconnected.push(...down)
        byStatus.healthy.push(...up)
      }
    }
    const deadline = performance.now() + 120_000
    for (let i = 0; i < options.cycles && performance.now() < deadline; i++) await cycle(1, single)
    for (let i = 0; i < options.fanoutCycles && performance.now() < deadline; i++) await cycle(options.fanoutWaiters, fanout)
  } finally {
    http.close()
    await stopChild(store.child)
  }
  const result = {
    single: summarize(single),
    singleByStatus: { healthy: summarize(byStatus.healthy), disconnected: summarize(byStatus.disconnected) },
    fanout: summarize(fanout), fanoutWaiters: options.fanoutWaiters, early, failures }
  options.log(
    `  wait_service, 1 waiter: p50 ${result.single.p50.toFixed(2)} p99 ${result.single.p99.toFixed(2)} ms (${single.length} waits); ` +
      `${options.fanoutWaiters} waiters: p50 ${result.fanout.p50.toFixed(2)} p99 ${result.fanout.p99.toFixed(2)} ms (${fanout.length} waits); early ${early}, failed ${failures}`
  )
  return result
}
