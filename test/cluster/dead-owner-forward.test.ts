/**
 * A call forwarded to an owner that was just SIGKILLed (docs/replicas.md, "Ownership, views and
 * forwarding"): three store processes on one real redis-server. The replica that runs a service is
 * killed, and calls are made at once on each of the two others, while the killed replica still
 * holds the lease in Redis: they forward to the dead replica's URL (from its last view), are
 * refused, and try again. One of the two takes the lease meanwhile; its call must then run there (it
 * owns the service now: the dead URL is not tried again), and the other's goes to it, both well
 * within the calls' time-out. The calls in flight on one replica share its lookups of the lease
 * holder in Redis (two GETs per 200 ms try, not per call). A client that gives up meanwhile is
 * counted 499, never 500, on the direct call route (one replica, its metrics) and through HttpApi
 * (the other, in debug logging: its access lines), and no replica logs an internal error.
 */
import { describe, expect, it } from "vitest"
import { RETRY_MS } from "../../src/cluster/forward.js"
import { clusterKey } from "../../src/redis/key-names.js"
import { eventually, hasRedisServer, replicasListening, useReplicaProcesses, within, type StoreProcess } from "../support/index.js"

const CLUSTER = "deadowner"
const LEASE_MS = 4000
/** The calls' time-out (s): without the fix the new owner's call is refused by the dead URL until then. */
const CALL_TIMEOUT_S = 60
/** The calls made at once on each of the two others as the owner is killed. */
const CALLS_EACH = 8
/** GETs the replicas may make during the move besides the lookups of the lease holder (a margin). */
const OTHER_GETS = 40

describe.skipIf(!hasRedisServer)("replica mode: a call forwarded to an owner just killed", { timeout: 120_000 }, () => {
  const cluster = useReplicaProcesses({ cluster: CLUSTER, leaseMs: LEASE_MS })

  it("the replica that takes the lease runs the calls it was forwarding to the dead owner; the other forwards to it, one lookup of the holder per try; a client gone is no 500", async () => {
    const client = await cluster.redis.connect()
    const leaseKey = clusterKey(CLUSTER, "lease", "store/kit")
    const holder = async () => (await client.get(leaseKey)) ?? ""
    const holds = (r: StoreProcess, h: string) => h.includes(`-${r.pid}-`)

    // The owner starts alone with the service, so it takes its lease; one service for three replicas: no hand-over.
    const owner = await cluster.replica({ mcpServers: { kit: { url: cluster.upstream.url } } })
    expect(await eventually(async () => holds(owner, await holder()), 15_000, 50)).toBe(true)
    // One replica takes calls on the direct route; the other, in debug logging, through HttpApi (with access lines).
    const [direct, logged] = [await cluster.replica({ mcpServers: {} }), await cluster.replica({ mcpServers: {} }, { logLevel: "debug" })] as const
    const others = [direct, logged]
    expect(await eventually(async () => (await replicasListening(client, CLUSTER)) === 3, 15_000, 50)).toBe(true)
    const body = (text: string) => ({ tool_name: "kit__echo", args: { text }, timeout: CALL_TIMEOUT_S })
    const call = (r: StoreProcess, text: string) => r.post("/for_store/call_tool", body(text))
    for (const r of others) {
      const waited = await r.post("/for_store/wait_service", { client_id_or_service_name: "kit", status: "healthy", timeout: 15 })
      expect(waited.body.data?.final_status).toBe("healthy")
      // Each knows the owner from its view: a call is forwarded to it.
      expect((await call(r, "before")).body.result).toBe("before")
    }

    owner.child.kill("SIGKILL")
    await owner.exited
    // Still the dead replica's lease: the calls are made before either survivor takes it over.
    expect(holds(owner, await holder())).toBe(true)
    // A client that gives up after a second: its call is still being forwarded then.
    const givenUp = others.map((r) =>
      fetch(`${r.url}/for_store/call_tool`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body("gone")), signal: AbortSignal.timeout(1000) }).then(
        (reply) => `answered ${reply.status}`,
        (e: Error) => e.name
      )
    )
    const lines = (r: StoreProcess) => r.output().split("\n").slice(-30).join("\n")
    const gets = async () => Number(/cmdstat_get:calls=(\d+)/.exec(await client.info("commandstats"))?.[1] ?? 0)
    const getsBefore = await gets()
    const movedAt = performance.now()
    const moved = others.flatMap((r, i) => Array.from({ length: CALLS_EACH }, (_, j) => ({ r, text: `moved ${i} ${j}` })))
    const replies = await within(Promise.all(moved.map(({ r, text }) => call(r, text))), 6 * LEASE_MS, "the calls made as the owner was killed")
    replies.forEach((reply, k) => {
      const { r, text } = moved[k] as (typeof moved)[number]
      expect(reply.body.result, `${reply.text}\nthe replica's last lines:\n${lines(r)}`).toBe(text)
    })
    // The retries of one replica share their lookups of the lease holder (two GETs), one per 200 ms:
    // many calls in flight cost what one does, not ten GETs a second each (565 GETs here without it).
    const tries = Math.ceil((performance.now() - movedAt) / RETRY_MS) + 2
    const looked = (await gets()) - getsBefore
    expect(looked, `GETs while ${moved.length} calls were moved, over ${tries} tries`).toBeLessThanOrEqual(others.length * 2 * tries + OTHER_GETS)
    expect(await Promise.all(givenUp)).toEqual(["TimeoutError", "TimeoutError"])

    // One of them took the lease; the other forwards to it.
    const taken = await holder()
    expect(others.filter((r) => holds(r, taken))).toHaveLength(1)
    for (const r of others) expect((await call(r, "after")).body.result).toBe("after")

    // The clients gone are counted 499 once their calls ended (cancelled), on either path; nothing is a 500 or an internal error.
    const counted = async () => (await direct.get("/metrics")).text
    const gone = await eventually(async () => (await counted()).includes('mcpstore_http_requests_total{method="POST",status="499"} 1'), 10_000, 100)
    expect(gone, (await counted()).split("\n").filter((l) => l.startsWith("mcpstore_http_requests_total")).join("\n")).toBe(true)
    expect(await counted()).not.toContain('status="500"')
    const logged499 = await eventually(() => /POST \/for_store\/call_tool 499 /.test(logged.output()), 10_000, 100)
    expect(logged499, logged.output().split("\n").filter((l) => l.includes("POST /for_store/call_tool")).join("\n")).toBe(true)
    expect(logged.output()).not.toMatch(/POST \S+ 5\d\d /)
    for (const r of others) expect(r.output()).not.toMatch(/INTERNAL_ERROR|unexpected defect/)
  })
})
