/**
 * Monitoring in replica mode, two real store processes on one real Redis (docs/replicas.md): the
 * replica that mirrors a service records each of its transitions once, however many views its owner
 * publishes (one after each health check); its health checks and transitions are counted in
 * `/metrics` by the owner only, so the sum over the replicas is the cluster's.
 */
import { describe, expect, it } from "vitest"
import { clusterKey } from "../../src/redis/key-names.js"
import { eventually, fixtureService, hasRedisServer, replicasListening, useReplicaProcesses, type StoreProcess } from "../support/index.js"

const CLUSTER = "monitoring"

describe.skipIf(!hasRedisServer)("monitoring of two replicas", { timeout: 90_000 }, () => {
  const cluster = useReplicaProcesses({ cluster: CLUSTER, leaseMs: 4000 })

  /** A metric's sample for the service, or 0 when the replica has none. */
  const sample = async (r: StoreProcess, line: string): Promise<number> => {
    const text = (await r.get("/metrics")).text
    const found = text.split("\n").find((l) => l.startsWith(`${line} `))
    return found === undefined ? 0 : Number(found.slice(line.length + 1))
  }
  const transitions = async (r: StoreProcess) =>
    ((await r.get("/monitoring/service_health_history?service_name=svc&hours=1")).body.transitions as Array<{ from: string | null; to: string; at: string }>).map(
      (t) => `${t.from}>${t.to}@${t.at}`
    )

  it("a mirror records each transition once; checks and transitions are counted where the service runs", async () => {
    const replicas = await Promise.all([0, 1].map(() => cluster.replica({ mcpServers: {} }, { monitoring: { health_check_seconds: 1 } })))
    const client = await cluster.redis.connect()
    expect(await eventually(async () => (await replicasListening(client, CLUSTER)) === 2, 30_000, 50)).toBe(true)
    const [r0] = replicas as [StoreProcess, StoreProcess]
    expect((await r0.post("/for_store/add_service?wait=15", fixtureService("svc"))).body.connected).toEqual(["svc"])
    const holder = (await client.get(clusterKey(CLUSTER, "lease", "store/svc"))) ?? ""
    const owner = replicas.find((r) => holder.includes(`-${r.pid}-`))!
    const mirror = replicas.find((r) => r !== owner)!
    expect(owner).toBeDefined()
    // Several health checks, each published to the mirror as a view.
    const checks = 'mcpstore_health_check_duration_seconds_count{scope="store",service="svc"}'
    expect(await eventually(async () => (await sample(owner, checks)) >= 4, 20_000, 200)).toBe(true)
    const seen = await transitions(owner)
    expect(seen.length).toBeGreaterThan(0)
    expect(await eventually(async () => (await transitions(mirror)).length >= seen.length, 5_000, 100)).toBe(true)
    expect(await transitions(mirror)).toEqual(seen)
    // Counted once in the cluster: by the owner.
    expect(await sample(mirror, checks)).toBe(0)
    expect(await sample(owner, 'mcpstore_status_transitions_total{to="healthy"}')).toBe(1)
    expect(await sample(mirror, 'mcpstore_status_transitions_total{to="healthy"}')).toBe(0)
  })
})
