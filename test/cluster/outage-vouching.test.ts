/**
 * A true Redis outage seen first by the replica that runs a service (docs/replicas.md, "Failure
 * modes"): two store processes on one real redis-server, frozen with SIGSTOP for longer than the
 * lease time. The other replica is starved of CPU meanwhile (SIGSTOP/SIGCONT in turn: it runs
 * 50 ms of every 500), so its probe never reaches a verdict (a turn that comes late gives none) and
 * it still counts Redis as up when the owner asks. Its answer must come from a command sent after
 * the question: it does not reach Redis, so the owner keeps its leases past their deadlines, no
 * lease is lost, and calls through either replica are answered by the owner all along.
 */
import { describe, expect, it } from "vitest"
import { COMMAND_TIMEOUT_MS } from "../../src/redis/connection.js"
import { clusterKey } from "../../src/redis/key-names.js"
import { eventually, hasRedisServer, replicasListening, useReplicaProcesses, within, type StoreProcess } from "../support/index.js"

const CLUSTER = "vouch"
/**
 * The owner must have the starved replica's answer before its earliest deadline, `2/3 ttl - margin`
 * after the freeze (a renewal sent just before it): its probe's verdict and an answer that takes a
 * few of the starved replica's turns fit in 4.3 s even when the rest of the suite loads the machine.
 */
const LEASE_MS = 8000
/** Longer than the lease time: every deadline of a lease renewed before the freeze passes meanwhile. */
const FROZEN_MS = LEASE_MS + 2000
/** How long the starved replica runs, and stays stopped, in turn (ms): each turn of its 250 ms probe comes late. */
const RUNS_MS = 50
const STOPPED_MS = 450

describe.skipIf(!hasRedisServer)("replica mode: a Redis outage the other replica has not noticed yet", { timeout: 120_000 }, () => {
  const cluster = useReplicaProcesses({ cluster: CLUSTER, leaseMs: LEASE_MS })

  it("the owner keeps its leases while the replica it asks still counts Redis as up: no lease lost, calls through both answered by the owner", async () => {
    // The owner starts first with the service, so it takes its lease (and the leader's) alone.
    const owner = await cluster.replica({ mcpServers: { kit: { url: cluster.upstream.url } } })
    const client = await cluster.redis.connect()
    const leaseKey = clusterKey(CLUSTER, "lease", "store/kit")
    expect(await eventually(async () => (await client.get(leaseKey))?.includes(`-${owner.pid}-`) === true, 15_000, 50)).toBe(true)
    const other = await cluster.replica({ mcpServers: {} })
    for (const r of [owner, other]) {
      const waited = await r.post("/for_store/wait_service", { client_id_or_service_name: "kit", status: "healthy", timeout: 15 })
      expect(waited.body.data?.final_status).toBe("healthy")
    }
    // The owner asks the replicas its keeper last read (every ttl/3): both registered with their URLs, then one keeper turn.
    expect(await eventually(async () => (await replicasListening(client, CLUSTER)) === 2, 15_000, 50)).toBe(true)
    await new Promise((resolve) => setTimeout(resolve, LEASE_MS / 3 + 500))

    const call = (r: StoreProcess, text: string) => r.post("/for_store/call_tool", { tool_name: "kit__echo", args: { text } })
    for (const r of [owner, other]) {
      const before = await call(r, "before")
      const logs = `owner's log:\n${owner.output().slice(-3000)}\nthe other's log:\n${other.output().slice(-3000)}`
      expect(before.body.result, `${r === owner ? "owner" : "other"}: ${before.text}\n${logs}`).toBe("before")
    }

    // Starved: its pending timers run late on each resume, and it answers what reaches it.
    let starving = true
    const starve = (async () => {
      while (starving) {
        other.child.kill("SIGSTOP")
        await new Promise((resolve) => setTimeout(resolve, STOPPED_MS))
        other.child.kill("SIGCONT")
        await new Promise((resolve) => setTimeout(resolve, RUNS_MS))
      }
    })()
    const lastLines = () => `the owner's last lines:\n${owner.output().split("\n").slice(-25).join("\n")}`
    cluster.redis.freeze()
    try {
      try {
        const until = Date.now() + FROZEN_MS
        for (let i = 0; Date.now() < until; i++) {
          const began = performance.now()
          const reply = await within(call(owner, `frozen ${i}`), 10_000, `a call through the owner while frozen (${i})`)
          const took = performance.now() - began
          expect(reply.body.result, `${reply.text}\n${lastLines()}`).toBe(`frozen ${i}`)
          // Never held by a Redis command: one would have waited its whole time-out.
          expect(took, `call ${i} took ${Math.round(took)} ms\n${lastLines()}`).toBeLessThan(COMMAND_TIMEOUT_MS)
          await new Promise((resolve) => setTimeout(resolve, 250))
        }
      } finally {
        starving = false
        await starve
        other.child.kill("SIGCONT")
      }
      // Still frozen: the other replica forwards to the owner, which still runs the service.
      const forwarded = await eventually(async () => (await within(call(other, "forwarded"), COMMAND_TIMEOUT_MS, "a call through the other replica while frozen")).body.result === "forwarded", 5000, 100)
      expect(forwarded ? "forwarded" : (await call(other, "forwarded")).text).toBe("forwarded")
    } finally {
      cluster.redis.thaw()
    }

    expect(owner.output()).toContain("Redis is unreachable for every replica")
    expect(owner.output()).not.toMatch(/lease \S+ lost by replica/)
    // Back: the owner renews its lease; it never had to take it back from anyone.
    expect(await eventually(async () => (await client.pTTL(leaseKey)) > LEASE_MS / 2 && (await client.get(leaseKey))?.includes(`-${owner.pid}-`) === true, 10_000, 50)).toBe(true)
    expect((await call(other, "after")).body.result).toBe("after")
  })
})
