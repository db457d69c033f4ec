// The store as a library, in-process, against real stdio servers: createStore, the ScopeApi
// operations (addService, waitService, callTool) per scope, the actors read directly (store actor,
// agent actor, service actors by scope and system id, snapshots, subscriptions), and stop() ending
// every child process.
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { readFileSync, rmSync } from "node:fs"
import { join } from "node:path"
import { agentScope, STORE_SCOPE } from "../../src/domain/service-definition.js"
import { statusOf } from "../../src/machines/service.js"
import { createStore } from "../../src/composition/layer-graph.js"
import type { Store } from "../../src/runtime/store.js"
import { FAST_MONITORING, firstText, fixtureService, freshDir, processGone } from "../support/index.js"

describe("createStore (library use)", { timeout: 10_000 }, () => {
  let dir: string
  let store: Store

  beforeAll(async () => {
    dir = freshDir()
    store = await createStore({ mcpConfigFile: join(dir, "mcp.json"), monitoring: FAST_MONITORING })
  }, 15_000)
  afterAll(async () => {
    await store?.stop()
    rmSync(dir, { recursive: true, force: true })
  }, 15_000)

  const pidOf = async (scope: ReturnType<Store["forStore"]>, tool: string) =>
    Number(firstText((await scope.callTool({ tool_name: tool, timeout: 10 })).content))

  it("adds a store service, writes the file, waits for it and calls its tools", { timeout: 20_000 }, async () => {
    const api = store.forStore()
    const added = await api.addService(fixtureService("lib", "--spawn-grandchild"), { waitSeconds: 10 })
    expect(added).toMatchObject({ added: ["lib"], updated: [], unchanged: [] })
    expect(added.services[0]).toMatchObject({ name: "lib", status: "healthy", scope: "store", transport_type: "stdio" })
    const file = JSON.parse(readFileSync(join(dir, "mcp.json"), "utf8"))
    expect(file.mcpServers.lib.args).toEqual(fixtureService("lib", "--spawn-grandchild").args)

    const waited = await api.waitService({ client_id_or_service_name: "lib", status: "healthy", timeout: 5 })
    expect(waited.result).toBe(true)
    expect(waited.final_status).toBe("healthy")
    const timedOut = await api.waitService({ client_id_or_service_name: "lib", status: ["disconnected"], timeout: 0.1 })
    expect(timedOut).toMatchObject({ result: false, final_status: "healthy" })

    const out = await api.callTool({ tool_name: "lib__add", args: { a: 20, b: 22 } })
    expect(out).toMatchObject({ result: "42", is_error: false, tool_name: "lib__add", original_name: "add", service_name: "lib" })
    const failed = await api.callTool({ tool_name: "fail" })
    expect(failed.is_error).toBe(true)

    await expect(api.callTool({ tool_name: "lib__missing" })).rejects.toMatchObject({ _tag: "ToolNotFound" })
    await expect(api.waitService({ client_id_or_service_name: "ghost", status: "healthy", timeout: 1 })).rejects.toMatchObject({
      _tag: "ServiceNotFound"
    })
    await expect(api.addService({ name: "a__b", url: "http://127.0.0.1:9/mcp" })).rejects.toMatchObject({ _tag: "ValidationError" })
    expect(api.listTools().map((t) => t.name)).toEqual(expect.arrayContaining(["lib__echo", "lib__grandchild_pid"]))
  })

  it("agent scopes: forAgent adds into its own space; a malformed id is refused", { timeout: 20_000 }, async () => {
    const a1 = store.forAgent("a1")
    const added = await a1.addService(fixtureService("mine"), { waitSeconds: 10 })
    expect(added.services[0]).toMatchObject({ name: "mine", scope: "a1", status: "healthy" })
    const out = await a1.callTool({ tool_name: "echo", args: { text: "agent call" } })
    expect(out).toMatchObject({ result: "agent call", tool_name: "mine__echo" })
    await expect(store.forStore().callTool({ tool_name: "mine__echo", args: { text: "x" } })).rejects.toMatchObject({ _tag: "ToolNotFound" })
    await expect(a1.callTool({ tool_name: "lib__echo", args: { text: "x" } })).rejects.toMatchObject({ _tag: "ToolNotFound" })
    expect(() => store.forAgent("not valid!")).toThrow(expect.objectContaining({ _tag: "ValidationError" }))
    const file = JSON.parse(readFileSync(join(dir, "mcp.json"), "utf8"))
    expect(Object.keys(file.agents.a1.mcpServers)).toEqual(["mine"])
  })

  it("exposes the actors: store, agent, services by scope and by system id, with snapshots", () => {
    const root = store.actor.getSnapshot()
    expect(Object.keys(root.context.services)).toEqual(["lib"])
    expect(Object.keys(root.context.agents)).toEqual(["a1"])
    expect(store.agentIds()).toEqual(["a1"])

    const agent = store.agentActor("a1")!
    expect(agent).toBeDefined()
    expect(agent.getSnapshot().context.agentId).toBe("a1")
    expect(Object.keys(agent.getSnapshot().context.services)).toEqual(["mine"])
    expect(store.agentActor("nobody")).toBeUndefined()

    const lib = store.serviceActor(STORE_SCOPE, "lib")!
    const mine = store.serviceActor(agentScope("a1"), "mine")!
    expect(statusOf(lib.getSnapshot())).toBe("healthy")
    expect(statusOf(mine.getSnapshot())).toBe("healthy")
    expect(lib.getSnapshot().context.tools.map((t) => t.name)).toContain("grandchild_pid")
    expect(mine.getSnapshot().context.scope).toEqual(agentScope("a1"))
    expect(store.serviceActor(STORE_SCOPE, "mine")).toBeUndefined()
    expect(store.forStore().findService("lib")).toBe(lib)
    expect(store.allServiceActors()).toHaveLength(2)

    // Stable system ids (docs/lifecycle.md, Actors).
    expect(store.actor.system.get("store")).toBe(store.actor)
    expect(store.actor.system.get("agent:a1")).toBe(agent)
    expect(store.actor.system.get("service:store:lib")).toBe(lib)
    expect(store.actor.system.get("service:agent:a1:mine")).toBe(mine)
  })

  it("a subscription sees a restart go initializing -> healthy, with recorded transitions", { timeout: 20_000 }, async () => {
    const actor = store.serviceActor(agentScope("a1"), "mine")!
    const seen: string[] = []
    const sub = actor.subscribe((s) => {
      const status = statusOf(s)
      if (seen.at(-1) !== status) seen.push(status)
    })
    try {
      actor.send({ type: "RESTART", reason: "test restart" })
      const waited = await store.forAgent("a1").waitService({ client_id_or_service_name: "mine", status: "healthy", timeout: 10 })
      expect(waited.result).toBe(true)
      expect(seen).toEqual(["initializing", "healthy"])
      const last = actor.getSnapshot().context.transitions.slice(-2)
      expect(last.map((t) => [t.from, t.to, t.reason])).toEqual([
        ["healthy", "initializing", "test restart"],
        ["initializing", "healthy", "connected"]
      ])
    } finally {
      sub.unsubscribe()
    }
  })

  it("stop() ends every child process (and grandchild) and stops the actors", { timeout: 20_000 }, async () => {
    const libPid = await pidOf(store.forStore(), "lib__pid")
    const grandchild = await pidOf(store.forStore(), "lib__grandchild_pid")
    const agentPid = await pidOf(store.forAgent("a1"), "mine__pid")
    for (const pid of [libPid, grandchild, agentPid]) expect(processGone(pid)).toBe(false)
    expect(store.connections.size).toBeGreaterThanOrEqual(2)

    await store.stop()
    expect(processGone(libPid)).toBe(true)
    expect(processGone(agentPid)).toBe(true)
    expect(processGone(grandchild)).toBe(true)
    expect(store.stopped).toBe(true)
    expect(store.connections.size).toBe(0)
    expect(store.actor.getSnapshot().status).toBe("stopped")
    // Idempotent.
    await store.stop()
  })
})
