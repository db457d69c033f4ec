/**
 * Calls made on a replica while it hands a service over (docs/replicas.md, "Ownership, views and
 * forwarding"): two store processes on one real redis-server. The first runs both services alone,
 * the second joins, and the first hands one over: its actor mirrors at once, while the lease stays
 * its own until the service's process has ended (here 2 s: it waits for SIGKILL). Its
 * calls of that service meanwhile wait for the next owner and run there; none is sent to its own
 * forwarding route, where it would only be answered "not run" every 200 ms (a proxy as its
 * advertised URL sees every forwarded request that reaches it, its own included). A call in flight
 * when the hand-over starts ends where it began (the connection's close waits for it), not
 * cancelled; one begun while it runs waits for the next owner.
 */
import { describe, expect, it } from "vitest"
import { clusterKey } from "../../src/redis/key-names.js"
import { stdioFixture } from "../fixtures/paths.js"
import { eventually, hasRedisServer, recordingProxy, replicasListening, useReplicaProcesses, within, type StoreProcess } from "../support/index.js"

/** Runs its arguments as a child on its stdio; once it has had SIGTERM, it stays until SIGKILL. */
const ENDS_AT_SIGKILL = [
  'const { spawn } = require("node:child_process")',
  "let ending = false",
  'process.on("SIGTERM", () => { ending = true; setInterval(() => undefined, 1 << 30) })',
  'const child = spawn(process.argv[1], process.argv.slice(2), { stdio: "inherit" })',
  'child.on("exit", (code) => { if (!ending) process.exit(code ?? 1) })'
].join("\n")

const CLUSTER = "handover"
const LEASE_MS = 4000

describe.skipIf(!hasRedisServer)("replica mode: calls made on a replica handing a service over", { timeout: 120_000 }, () => {
  const cluster = useReplicaProcesses({ cluster: CLUSTER, leaseMs: LEASE_MS })

  it("wait for the next owner and run there; the replica sends none to itself", async () => {
    const client = await cluster.redis.connect()
    const holder = async (name: string) => (await client.get(clusterKey(CLUSTER, "lease", `store/${name}`))) ?? ""
    const holds = (r: StoreProcess, h: string) => h.includes(`-${r.pid}-`)
    const proxy = await recordingProxy()
    try {
      // The fixture under a process that outlives SIGTERM until the store's SIGKILL, after its 2 s grace: the hand-over's drain lasts that long.
      const fixture = stdioFixture()
      const slow = { command: process.execPath, args: ["-e", ENDS_AT_SIGKILL, fixture.command, ...fixture.args] }
      const first = await cluster.replica({ mcpServers: { one: slow, two: slow } }, { advertiseUrl: proxy.url })
      proxy.target(first.url)
      const names = ["one", "two"] as const
      for (const name of names) {
        expect(await eventually(async () => holds(first, await holder(name)), 15_000, 50)).toBe(true)
        const waited = await first.post("/for_store/wait_service", { client_id_or_service_name: name, status: "healthy", timeout: 15 })
        expect(waited.body.data?.final_status).toBe("healthy")
      }
      const call = (name: string, text: string) => first.post("/for_store/call_tool", { tool_name: `${name}__echo`, args: { text }, timeout: 60 })

      const second = await cluster.replica({ mcpServers: {} })
      expect(await eventually(async () => (await replicasListening(client, CLUSTER)) === 2, 15_000, 50)).toBe(true)
      // A 3 s call on each service, begun before the hand-over starts (the first notices the second within a
      // third of a lease): the one of the service handed over ends on the connection it began on, not cancelled.
      const long = names.map((name) => first.post("/for_store/call_tool", { tool_name: `${name}__sleep`, args: { ms: 3000 }, timeout: 60 }))
      // Calls on the first, every 50 ms on each service, until the second holds one of the leases and has run a call of it.
      const calls: Array<Promise<{ readonly text: string; readonly result: unknown; readonly answer: string }>> = []
      let n = 0
      const moved = async () => {
        for (const name of names) if (holds(second, await holder(name))) return name
        return undefined
      }
      const looping = (async () => {
        for (;;) {
          for (const name of names) {
            const text = `${name} ${++n}`
            calls.push(call(name, text).then((reply) => ({ text, result: reply.body.result, answer: reply.text })))
          }
          const name = await moved()
          if (name !== undefined && (await call(name, "after")).body.result === "after") return name
          await new Promise((resolve) => setTimeout(resolve, 50))
        }
      })()
      // A 4 s call begun as soon as the hand-over is logged, while the 3 s call still runs: it waits for the next owner and
      // runs there, not on the connection about to close (begun there, it would be cut when the 3 s call has ended).
      let handing: string | undefined
      expect(await eventually(() => (handing = /hands store\/(one|two) over/.exec(first.output())?.[1]) !== undefined, 6 * LEASE_MS, 10)).toBe(true)
      const begunDuring = first.post("/for_store/call_tool", { tool_name: `${handing}__sleep`, args: { ms: 4000 }, timeout: 60 })
      const handed = await within(looping, 6 * LEASE_MS, "the hand-over")
      expect(handed).toBe(handing)
      const during = await within(begunDuring, 6 * LEASE_MS, "the call begun during the hand-over")
      expect(during.body.success, during.text).toBe(true)
      const replies = await within(Promise.all(calls), 6 * LEASE_MS, "the calls made during the hand-over")
      for (const reply of replies) expect(reply.result, `${reply.text}: ${reply.answer}`).toBe(reply.text)
      for (const reply of await within(Promise.all(long), 6 * LEASE_MS, "the long calls")) expect(reply.body.success, reply.text).toBe(true)
      expect(replies.filter((r) => r.text.startsWith(handed)).length).toBeGreaterThan(0)
      expect(holds(first, await holder(handed === "one" ? "two" : "one"))).toBe(true)

      // Every call the first made while it still held the lease (its actor mirroring) waited; none reached its own route.
      expect(proxy.received.filter((r) => r.op === "call").length, "calls forwarded to the first replica's own route").toBe(0)
      for (const r of [first, second]) expect(r.output()).not.toMatch(/INTERNAL_ERROR|unexpected defect/)
    } finally {
      proxy.close()
    }
  })
})
