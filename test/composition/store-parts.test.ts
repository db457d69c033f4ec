// The store's parts as layers (src/runtime/store-parts.ts): released in the reverse order of their
// layers, which is the order a stopping store needs (the change under way ends first, then the
// lifecycle log, the asynchronous calls, approvals, held calls and tasks, the per-user connections,
// the actors, the connections, the progress and inspection listeners), then the records; the
// operations see the parts through the host built on them (src/runtime/store-host.ts), not the
// store; and `store.stop()` on a store whose graph belongs to someone else releases the store and
// its parts only.
import { afterAll, describe, expect, it } from "vitest"
import { rmSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { Context, Effect, Exit, Layer, Scope } from "effect"
import { storeLayer } from "../../src/composition/layer-graph.js"
import { statusOf } from "../../src/machines/service.js"
import { Records } from "../../src/runtime/services.js"
import {
  ActorSystemService,
  ApprovalsService,
  AsyncCallsService,
  ConnectionsService,
  HeldCallsService,
  InspectionService,
  LifecycleLogService,
  ProgressEventsService,
  TaskRelaysService,
  ToolSearchService,
  UserCredentialsService,
  WaitersService
} from "../../src/runtime/store-parts.js"
import { StoreHostService } from "../../src/runtime/store-host.js"
import * as library from "../../src/index.js"
import { Calls, Queries, StoreService } from "../../src/index.js"
import { eventually, FAST_MONITORING, fixtureService, freshDir, processGone } from "../support/index.js"

/** Wraps `object[method]` so that each call first notes `label` in `events`. */
const spy = <T extends object>(events: string[], label: string, object: T, method: keyof T & string): void => {
  const original = (object[method] as (...args: unknown[]) => unknown).bind(object)
  Object.defineProperty(object, method, {
    value: (...args: unknown[]) => {
      events.push(label)
      return original(...args)
    },
    configurable: true
  })
}

describe("the store's parts, as layers", { timeout: 30_000 }, () => {
  const dir = freshDir()
  afterAll(() => rmSync(dir, { recursive: true, force: true }))

  const build = async (name: string) => {
    const { name: _, ...definition } = fixtureService("svc")
    const file = join(dir, `${name}.json`)
    writeFileSync(file, JSON.stringify({ mcpServers: { svc: definition } }))
    const scope = Effect.runSync(Scope.make())
    const context = await Effect.runPromise(Layer.buildWithScope(storeLayer({ mcpConfigFile: file, monitoring: FAST_MONITORING }), scope))
    const store = Context.get(context, StoreService)
    const face = store.serviceActor({ kind: "store" }, "svc")
    expect(await eventually(() => face !== undefined && statusOf(face.getSnapshot()) === "healthy", 15_000)).toBe(true)
    return { scope, context, store, pid: face!.getSnapshot().context.connection?.pid as number }
  }

  it("releases the change under way first, then each part in the reverse order of its layer, then the records", async () => {
    const { scope, context, store, pid } = await build("order")
    const events: string[] = []
    spy(events, "lifecycle log stopped", Context.get(context, LifecycleLogService), "stop")
    spy(events, "async calls closed", Context.get(context, AsyncCallsService), "close")
    spy(events, "approvals closed", Context.get(context, ApprovalsService), "close")
    spy(events, "held calls closed", Context.get(context, HeldCallsService), "close")
    spy(events, "tasks closed", Context.get(context, TaskRelaysService), "close")
    spy(events, "actors stopped", Context.get(context, ActorSystemService).root, "stop")
    spy(events, "per-user connections closed", Context.get(context, UserCredentialsService), "closeAll")
    spy(events, "connections closed", Context.get(context, ConnectionsService), "closeAll")
    spy(events, "progress listeners cleared", Context.get(context, ProgressEventsService), "clear")
    spy(events, "records closed", Context.get(context, Records), "close")
    const inspection = Context.get(context, InspectionService)
    inspection.listeners.add(() => undefined)
    const progress = Context.get(context, ProgressEventsService)
    progress.on(() => undefined)
    // A change under way when the release starts: it ends before any part is released.
    let letGo!: () => void
    const change = store.host.serialize(
      () =>
        new Promise<void>((resolve) => {
          letGo = () => {
            events.push("change ended")
            resolve()
          }
        })
    )
    const closing = Effect.runPromise(Scope.close(scope, Exit.void))
    await new Promise((resolve) => setTimeout(resolve, 50))
    expect(events).toEqual([])
    expect(store.stopped).toBe(true)
    letGo()
    await change
    await closing
    expect(events).toEqual([
      "change ended",
      "lifecycle log stopped",
      "async calls closed",
      "approvals closed",
      "held calls closed",
      "tasks closed",
      "per-user connections closed",
      "actors stopped",
      "connections closed",
      "progress listeners cleared",
      "records closed"
    ])
    expect(inspection.listeners.size).toBe(0)
    expect(progress.listening).toBe(false)
    expect(processGone(pid)).toBe(true)
  })

  it("the scopes' operations reach the parts through the host built on them, and the store holds the same parts", async () => {
    const { scope, context, store } = await build("host")
    const host = Context.get(context, StoreHostService)
    expect(store.forStore().effects.host).toBe(host)
    expect(Effect.runSync(store.agentContext("agent-1")).host).toBe(host)
    expect(host).not.toBe(store)
    expect(host.waiters).toBe(Context.get(context, WaitersService))
    expect(store.waiters).toBe(host.waiters)
    expect(host.progress).toBe(Context.get(context, ProgressEventsService))
    expect(store.progress).toBe(host.progress)
    expect(store.toolSearch).toBe(Context.get(context, ToolSearchService))
    expect(host.actor).toBe(Context.get(context, ActorSystemService).root)
    // The index reads the actor system's services: the one service of the file is found.
    const hits = store.toolSearch.search(store.forStore().effects, "echo", 5)
    expect(hits.map((h) => h.tool.name)).toContain("svc__echo")
    await Effect.runPromise(Scope.close(scope, Exit.void))
  })

  it("store.stop() on a graph owned elsewhere releases the store and its parts, not the records; the graph's release after it is clean", async () => {
    const { scope, context, store, pid } = await build("owned")
    await store.stop()
    expect(store.actor.getSnapshot().status).toBe("stopped")
    expect(processGone(pid)).toBe(true)
    // The records are the graph's: still open and written to.
    const records = Context.get(context, Records)
    const written = await records.append({ scope: "store", agent_id: null, service_name: "svc", tool_name: "echo", params: {}, result: 1, outcome: "success", error: null, duration_ms: 1, trace_id: "t1" })
    expect((await records.query({ limit: 10 })).executions.map((r) => r.id)).toContain(written.id)
    await Effect.runPromise(Scope.close(scope, Exit.void))
  })

  it("the graph's operations act on the store's scopes: a program given the graph lists the service and calls it, and the store stops with it", async () => {
    const { name: _, ...definition } = fixtureService("svc")
    const file = join(dir, "operations.json")
    writeFileSync(file, JSON.stringify({ mcpServers: { svc: definition } }))
    // As README "As a library" shows it, from the library's entry point.
    const program = Effect.gen(function* () {
      const store = yield* StoreService
      const queries = yield* Queries
      const calls = yield* Calls
      const scope = store.forStore().effects
      yield* queries.waitService(scope, { client_id_or_service_name: "svc", status: "healthy", timeout: 15 })
      const listed = yield* queries.listServices(scope)
      const output = yield* calls.callTool(scope, { tool_name: "echo", args: { text: "hi" } })
      return { store, listed, output }
    })
    const { store, listed, output } = await Effect.runPromise(program.pipe(Effect.provide(storeLayer({ mcpConfigFile: file, monitoring: FAST_MONITORING }))))
    expect(listed.map((s) => [s.name, s.status])).toEqual([["svc", "healthy"]])
    expect(JSON.stringify(output)).toContain("hi")
    expect(store.stopped).toBe(true)
    expect(store.actor.getSnapshot().status).toBe("stopped")
  })

  it("the library's entry gives the operations one way: the operation services (or a scope's ScopeApi), not the rooms' modules", () => {
    const exported = Object.keys(library)
    expect(exported).toEqual(expect.arrayContaining(["Calls", "Catalog", "Commands", "Queries", "StoreService", "storeLayer", "createStore", "Store", "ScopeApi"]))
    for (const room of ["calls", "catalog", "commands", "queries"]) expect(exported).not.toContain(room)
  })
})
