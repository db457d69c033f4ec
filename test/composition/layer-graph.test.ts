// The store's layer graph (src/composition/layer-graph.ts, src/runtime/store-layers.ts, src/cluster/replica-layers.ts): a start
// that fails part-way releases what it had acquired, the store (its actors, its child processes)
// before the records it writes to; a replica whose start fails leaves no Redis connection and no
// registry entry behind; and a store built by `createStore` stops in the order of its layers.
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from "vitest"
import { rmSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { Cause, Effect, Exit, Layer } from "effect"
import { clusterKey } from "../../src/redis/key-names.js"
import { TokenKeyError } from "../../src/config/redis-token-vault.js"
import { createStore, storeLayer } from "../../src/composition/layer-graph.js"
import { statusOf, type ServiceActorRef } from "../../src/machines/service.js"
import { AsyncResultsFromFile, CredentialsFromFile, DefinitionsFromFile, PinsFromFile, ProcessLedgerLive, RecordsFromFile, ServicesFileLive, StoreConfigLive, StoreLive, TokensFromFile, TracingLive } from "../../src/runtime/store-layers.js"
import { noReplication, Records, Replication } from "../../src/runtime/services.js"
import { eventually, FAST_MONITORING, fixtureService, freshDir, hasRedisServer, processGone, startRedisServer, type RedisServer } from "../support/index.js"

/** A services file with one local (stdio) service. */
const servicesFileWith = (dir: string, name: string): string => {
  const { name: _, ...definition } = fixtureService(name)
  const file = join(dir, "mcp.json")
  writeFileSync(file, JSON.stringify({ mcpServers: { [name]: definition } }))
  return file
}

describe("the store's layers, one store on its file", { timeout: 30_000 }, () => {
  const dirs: string[] = []
  afterAll(() => {
    for (const dir of dirs) rmSync(dir, { recursive: true, force: true })
  })

  it("a start that fails after the services run releases the store, then the records, and ends every child process", async () => {
    const dir = freshDir()
    dirs.push(dir)
    const file = servicesFileWith(dir, "svc")
    const events: string[] = []
    let pid: number | undefined
    // The records, as the file layer opens them, telling when they are released (and whether the child is gone by then).
    const RecordsSpy = Layer.scoped(
      Records,
      Effect.gen(function* () {
        yield* Effect.addFinalizer(() => Effect.sync(() => events.push(`records closed, child ${pid !== undefined && processGone(pid) ? "gone" : "running"}`)))
        return yield* Records
      })
    ).pipe(Layer.provide(RecordsFromFile))
    // A replication whose attach fails once the service runs (as a cluster's can).
    const Failing = Layer.succeed(Replication, {
      ...noReplication,
      shared: true,
      attach: async (host) => {
        const running = await eventually(() => {
          const face = host.face("store/svc") as unknown as ServiceActorRef | undefined
          pid = face === undefined || statusOf(face.getSnapshot()) !== "healthy" ? undefined : face.getSnapshot().context.connection?.pid
          return pid !== undefined
        }, 15_000)
        events.push(running ? "attach failed" : "attach failed before the service ran")
        throw new Error("the replication cannot attach")
      }
    })
    const graph = StoreLive.pipe(
      Layer.provideMerge(Layer.mergeAll(RecordsSpy, AsyncResultsFromFile, TokensFromFile, PinsFromFile, CredentialsFromFile, Failing, TracingLive, ProcessLedgerLive)),
      Layer.provideMerge(DefinitionsFromFile),
      Layer.provideMerge(ServicesFileLive),
      Layer.provideMerge(StoreConfigLive({ mcpConfigFile: file, monitoring: FAST_MONITORING }))
    )
    const exit = await Effect.runPromiseExit(Effect.scoped(Layer.build(graph)))
    expect(Exit.isFailure(exit)).toBe(true)
    if (Exit.isFailure(exit)) expect(String(Cause.squash(exit.cause))).toContain("the replication cannot attach")
    expect(events).toEqual(["attach failed", "records closed, child gone"])
    expect(pid !== undefined && processGone(pid)).toBe(true)
  })

  it("createStore: stop() releases the store, then the records and tokens; the records file stays usable", async () => {
    const dir = freshDir()
    dirs.push(dir)
    const file = servicesFileWith(dir, "svc")
    const store = await createStore({ mcpConfigFile: file, monitoring: FAST_MONITORING })
    const face = store.serviceActor({ kind: "store" }, "svc")
    expect(face).toBeDefined()
    expect(await eventually(() => statusOf(face!.getSnapshot()) === "healthy", 15_000)).toBe(true)
    const pid = face!.getSnapshot().context.connection?.pid as number
    await store.stop()
    expect(store.stopped).toBe(true)
    expect(processGone(pid)).toBe(true)
    expect(store.actor.getSnapshot().status).toBe("stopped")
    // A second store on the same file starts: nothing of the first is held.
    const again = await createStore({ mcpConfigFile: file, monitoring: FAST_MONITORING })
    expect(Object.keys(again.serviceActors({ kind: "store" }))).toEqual(["svc"])
    await again.stop()
  })

  it("createStore rejects with the cause when the services file cannot be read", async () => {
    const dir = freshDir()
    dirs.push(dir)
    const file = join(dir, "mcp.json")
    writeFileSync(file, "{ not json")
    await expect(createStore({ mcpConfigFile: file })).rejects.toThrow(/mcp\.json/)
  })
})

describe.skipIf(!hasRedisServer)("the store's layers, a replica", { timeout: 30_000 }, () => {
  let redis: RedisServer
  let dir: string
  beforeAll(async () => {
    redis = await startRedisServer()
    dir = freshDir()
  })
  afterAll(async () => {
    redis?.disconnectAll()
    await redis?.stop()
    rmSync(dir, { recursive: true, force: true })
  })

  it("a replica that cannot start (no MCPSTORE_SECRET_KEY) leaves the cluster: no Redis connection, no registry entry", async () => {
    const before = process.env["MCPSTORE_SECRET_KEY"]
    delete process.env["MCPSTORE_SECRET_KEY"]
    try {
      const file = servicesFileWith(dir, "svc")
      const options = { mcpConfigFile: file, monitoring: FAST_MONITORING, cluster: { redisUrl: redis.url, name: "layers", leaseMs: 2000 } }
      // Through the layer graph itself, and through createStore.
      const exit = await Effect.runPromiseExit(Effect.scoped(Layer.build(storeLayer(options))))
      // Said in full when it is not the expected refusal (seen once under a loaded full run).
      expect(Exit.isFailure(exit) ? Cause.squash(exit.cause) : "the layer was built", Exit.isFailure(exit) ? Cause.pretty(exit.cause) : "success").toBeInstanceOf(TokenKeyError)
      await expect(createStore(options)).rejects.toBeInstanceOf(TokenKeyError)
    } finally {
      if (before !== undefined) process.env["MCPSTORE_SECRET_KEY"] = before
    }
    const client = await redis.connect()
    // The cluster joined (its definitions were seeded), then left: only this client is connected.
    expect(await client.exists(clusterKey("layers", "defs"))).toBeGreaterThan(0)
    expect(await eventually(async () => (await client.clientList()).length === 1, 5000)).toBe(true)
    const replicas: string[] = []
    for await (const batch of client.scanIterator({ MATCH: clusterKey("layers", "replica", "*") })) replicas.push(...batch)
    expect(replicas).toEqual([])
  })

  it("a replica starts through createStore, registered while it runs, and leaves the cluster on stop()", async () => {
    const before = process.env["MCPSTORE_SECRET_KEY"]
    process.env["MCPSTORE_SECRET_KEY"] = "layers-test-shared-secret-0123456789"
    // Given back however the test ends, a time-out included.
    onTestFinished(() => {
      if (before === undefined) delete process.env["MCPSTORE_SECRET_KEY"]
      else process.env["MCPSTORE_SECRET_KEY"] = before
    })
    redis.disconnectAll()
    const client = await redis.connect()
    const registered = async () => {
      const keys: string[] = []
      for await (const batch of client.scanIterator({ MATCH: clusterKey("running", "replica", "*") })) keys.push(...batch)
      return keys.length
    }
    const file = join(dir, "running.json")
    writeFileSync(file, JSON.stringify({ mcpServers: {} }))
    const store = await createStore({ mcpConfigFile: file, monitoring: FAST_MONITORING, cluster: { redisUrl: redis.url, name: "running", leaseMs: 2000 } })
    expect(await registered()).toBe(1)
    expect(store.replication.shared).toBe(true)
    await store.stop()
    expect(await registered()).toBe(0)
    expect(await eventually(async () => (await client.clientList()).length === 1, 5000)).toBe(true)
  })
})
