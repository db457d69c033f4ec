/**
 * The supervisors (src/machines/root.ts, agent.ts, supervisor.ts): system ids, adding and removing
 * services and agents, and crash supervision ("a child actor that throws does not take its siblings
 * down"). The store is started with the same wiring as src/runtime/store.ts, its service machine
 * provided with fakes whose connect succeeds at once; a test makes one service crash by name.
 */
import { describe, expect, it } from "vitest"
import { createActor, SimulatedClock, type AnyActorRef } from "xstate"
import { agentScope, STORE_SCOPE, type Scope, type ServiceDefinition } from "../../src/domain/service-definition.js"
import { defaultMonitoring } from "../../src/domain/settings.js"
import { agentMachine, type AgentActorRef } from "../../src/machines/agent.js"
import { serviceMachine, statusOf, type ServiceActorRef } from "../../src/machines/service.js"
import { storeMachine } from "../../src/machines/root.js"
import {
  agentSystemId,
  crashedServiceName,
  serviceSystemId,
  STORE_SYSTEM_ID,
  type CrashReport,
  type SupervisorContext
} from "../../src/machines/supervisor.js"
import { createFakes, fakeConnection, flush, tool, type FakeConnection, type FakeOptions } from "../support/index.js"

const DEF: ServiceDefinition = { url: "http://127.0.0.1:9/mcp" }
const labelOf = (scope: Scope, name: string) => (scope.kind === "store" ? `store/${name}` : `${scope.agentId}/${name}`)

interface StoreOptions {
  /** Labels (`store/<name>` or `<agent>/<name>`) whose holdConnection throws, and how many times. */
  readonly crashOnHold?: Readonly<Record<string, number>>
  /** Service names whose guard `reportFast` throws (the machine's own code fails on a health report). */
  readonly throwOnReport?: ReadonlyArray<string>
  /** Service names whose action `toolsListed` throws (tests never refresh the others' tools). */
  readonly throwOnToolsListed?: ReadonlyArray<string>
  /** Service names whose first start throws (guard `isDisabled` of the initial transition). */
  readonly throwOnStart?: ReadonlyArray<string>
}

const startStore = (options: StoreOptions = {}) => {
  const crashesLeft = { ...options.crashOnHold }
  const fakeOptions: FakeOptions = {
    autoConnect: (input) => ({ connection: fakeConnection(labelOf(input.scope, input.name)), tools: [tool(input.name)] }),
    onHold: (input) => {
      const label = (input.connection as FakeConnection).label
      const left = crashesLeft[label] ?? 0
      if (left > 0) {
        crashesLeft[label] = left - 1
        throw new Error(`boom in ${label}`)
      }
    }
  }
  const fakes = createFakes(fakeOptions)
  const guards = serviceMachine.implementations.guards
  const reportFast = guards["reportFast"]!
  const isDisabled = guards["isDisabled"]!
  const startThrows = new Set(options.throwOnStart ?? [])
  const service = serviceMachine.provide({
    actors: fakes.actors,
    actions: {
      toolsListed: ({ context }) => {
        if (options.throwOnToolsListed?.includes(context.name)) throw new Error(`action failed in ${context.name}`)
      }
    },
    guards: {
      reportFast: (args, params) => {
        if (options.throwOnReport?.includes(args.context.name)) throw new Error(`guard failed in ${args.context.name}`)
        return reportFast(args, params)
      },
      isDisabled: (args, params) => {
        if (startThrows.delete(args.context.name)) throw new Error(`start failed in ${args.context.name}`)
        return isDisabled(args, params)
      }
    }
  })
  // The crashes the supervisors report (the runtime logs them: src/runtime/adapter.ts).
  const crashes: CrashReport[] = []
  const reportCrash = (_: unknown, report: CrashReport | undefined) => void (report && crashes.push(report))
  const machine = storeMachine.provide({
    actors: { service, agent: agentMachine.provide({ actors: { service }, actions: { reportCrash } }) },
    actions: { reportCrash }
  })
  const clock = new SimulatedClock()
  const actor = createActor(machine, { clock, input: { settings: defaultMonitoring() }, systemId: STORE_SYSTEM_ID })
  const errors: unknown[] = []
  actor.subscribe({ error: (e) => errors.push(e) })
  actor.start()
  const get = (id: string): AnyActorRef | undefined => actor.system.get(id)
  const serviceRef = (scope: Scope, name: string): ServiceActorRef => {
    const ref = get(serviceSystemId(scope, name))
    if (ref === undefined) throw new Error(`no actor ${serviceSystemId(scope, name)}`)
    return ref as ServiceActorRef
  }
  const s = {
    actor,
    clock,
    fakes,
    errors,
    crashes,
    get,
    serviceRef,
    status: (scope: Scope, name: string) => statusOf(serviceRef(scope, name).getSnapshot()),
    agent: (id: string) => get(agentSystemId(id)) as AgentActorRef | undefined,
    add: (scope: Scope, name: string, definition: ServiceDefinition = DEF) =>
      actor.send({ type: "ADD_SERVICE", scope, name, definition }),
    remove: (scope: Scope, name: string) => actor.send({ type: "REMOVE_SERVICE", scope, name }),
    /** The hold calls of one service's connections. */
    holds: (scope: Scope, name: string) =>
      fakes.calls.hold.filter((c) => (c.input.connection as FakeConnection).label === labelOf(scope, name)),
    advance: async (ms: number) => {
      clock.increment(ms)
      await flush()
    }
  }
  return s
}

const A1 = agentScope("a1")
const A2 = agentScope("a2")

describe("system ids", () => {
  it("store, agent:<id>, service:store:<name>, service:agent:<id>:<name>", async () => {
    const s = startStore()
    s.add(STORE_SCOPE, "weather")
    s.add(A1, "files")
    s.add(A2, "files")
    await flush()
    expect(s.get("store")).toBe(s.actor)
    expect(s.get("agent:a1")).toBeDefined()
    expect(s.get("agent:a2")).toBeDefined()
    expect(s.get("service:store:weather")).toBe(s.actor.getSnapshot().context.services["weather"])
    expect(s.get("service:agent:a1:files")).toBe(s.agent("a1")?.getSnapshot().context.services["files"])
    expect(s.get("service:agent:a2:files")).toBe(s.agent("a2")?.getSnapshot().context.services["files"])
    expect(s.get("service:agent:a1:files")).not.toBe(s.get("service:agent:a2:files"))
    for (const [scope, name] of [[STORE_SCOPE, "weather"], [A1, "files"], [A2, "files"]] as const) {
      expect(s.status(scope, name)).toBe("healthy")
      const ctx = s.serviceRef(scope, name).getSnapshot().context
      expect(ctx.scope).toEqual(scope)
      expect(ctx.name).toBe(name)
      expect(ctx.settings).toEqual(defaultMonitoring())
    }
    expect(s.errors).toEqual([])
  })

  it("the id helpers", () => {
    expect(STORE_SYSTEM_ID).toBe("store")
    expect(agentSystemId("x")).toBe("agent:x")
    expect(serviceSystemId(STORE_SCOPE, "n")).toBe("service:store:n")
    expect(serviceSystemId(agentScope("x"), "n")).toBe("service:agent:x:n")
  })

  it("crashedServiceName only accepts its own scope's known children", () => {
    const context = {
      scope: agentScope("a1"),
      settings: defaultMonitoring(),
      services: { s: {} as ServiceActorRef },
      crashes: {}
    } satisfies SupervisorContext
    expect(crashedServiceName(context, { type: "xstate.error.actor.service:agent:a1:s" })).toBe("s")
    expect(crashedServiceName(context, { type: "xstate.error.actor.service:agent:a1:other" })).toBeUndefined()
    expect(crashedServiceName(context, { type: "xstate.error.actor.service:agent:a2:s" })).toBeUndefined()
    expect(crashedServiceName(context, { type: "xstate.error.actor.service:store:s" })).toBeUndefined()
  })
})

describe("adding services", () => {
  it("ADD_SERVICE to an agent scope creates the agent once and routes every service to it", async () => {
    const s = startStore()
    expect(s.agent("a1")).toBeUndefined()
    s.add(A1, "x")
    const agent = s.agent("a1")
    expect(agent).toBeDefined()
    s.add(A1, "y")
    expect(s.agent("a1")).toBe(agent)
    expect(Object.keys(s.actor.getSnapshot().context.agents)).toEqual(["a1"])
    expect(Object.keys(agent!.getSnapshot().context.services).sort()).toEqual(["x", "y"])
    expect(s.actor.getSnapshot().context.services).toEqual({})
    await flush()
    expect(s.status(A1, "x")).toBe("healthy")
    expect(s.status(A1, "y")).toBe("healthy")
  })

  it("ADD_SERVICE for a name that exists is ignored (store and agent)", async () => {
    const s = startStore()
    s.add(STORE_SCOPE, "x")
    s.add(A1, "x")
    await flush()
    const store = s.serviceRef(STORE_SCOPE, "x")
    const agent = s.serviceRef(A1, "x")
    s.add(STORE_SCOPE, "x", { url: "http://other/mcp" })
    s.add(A1, "x", { url: "http://other/mcp" })
    await flush()
    expect(s.serviceRef(STORE_SCOPE, "x")).toBe(store)
    expect(s.serviceRef(A1, "x")).toBe(agent)
    expect(s.fakes.calls.connect).toHaveLength(2)
  })

  it("a service added with disabled: true starts disconnected", () => {
    const s = startStore()
    s.add(STORE_SCOPE, "off", { ...DEF, disabled: true })
    expect(s.status(STORE_SCOPE, "off")).toBe("disconnected")
    expect(s.fakes.calls.connect).toHaveLength(0)
  })
})

describe("removing services and agents", () => {
  it("REMOVE_SERVICE (store scope) stops the child: connection released, id freed, name reusable", async () => {
    const s = startStore()
    s.add(STORE_SCOPE, "x")
    s.add(STORE_SCOPE, "keep")
    await flush()
    const [hold] = s.holds(STORE_SCOPE, "x")
    const ref = s.serviceRef(STORE_SCOPE, "x")
    s.remove(STORE_SCOPE, "x")
    expect(hold?.released).toBe(true)
    expect(ref.getSnapshot().status).toBe("stopped")
    expect(s.get("service:store:x")).toBeUndefined()
    expect(Object.keys(s.actor.getSnapshot().context.services)).toEqual(["keep"])
    expect(s.status(STORE_SCOPE, "keep")).toBe("healthy")
    // timers of the stopped actor are gone: no check ever runs for it
    await s.advance(60_000)
    expect(s.fakes.calls.check.filter((c) => (c.input.connection as FakeConnection).label === "store/x")).toHaveLength(0)
    s.add(STORE_SCOPE, "x")
    await flush()
    expect(s.status(STORE_SCOPE, "x")).toBe("healthy")
    expect(s.serviceRef(STORE_SCOPE, "x")).not.toBe(ref)
  })

  it("REMOVE_SERVICE (agent scope) stops the child and keeps the agent", async () => {
    const s = startStore()
    s.add(A1, "x")
    s.add(A1, "y")
    await flush()
    const [hold] = s.holds(A1, "x")
    s.remove(A1, "x")
    expect(hold?.released).toBe(true)
    expect(s.get("service:agent:a1:x")).toBeUndefined()
    expect(s.agent("a1")?.getSnapshot().status).toBe("active")
    expect(Object.keys(s.agent("a1")!.getSnapshot().context.services)).toEqual(["y"])
    s.add(A1, "x")
    await flush()
    expect(s.status(A1, "x")).toBe("healthy")
  })

  it("REMOVE_SERVICE of an unknown name or agent changes nothing", async () => {
    const s = startStore()
    s.add(A1, "x")
    await flush()
    s.remove(STORE_SCOPE, "nope")
    s.remove(A1, "nope")
    s.remove(A2, "x")
    expect(s.actor.getSnapshot().status).toBe("active")
    expect(s.status(A1, "x")).toBe("healthy")
    expect(s.agent("a2")).toBeUndefined()
  })

  it("REMOVE_AGENT stops the agent and all its services", async () => {
    const s = startStore()
    s.add(A1, "x")
    s.add(A1, "y")
    s.add(A2, "x")
    s.add(STORE_SCOPE, "x")
    await flush()
    const agent = s.agent("a1")!
    const holds = [...s.holds(A1, "x"), ...s.holds(A1, "y")]
    s.actor.send({ type: "REMOVE_AGENT", agentId: "a1" })
    expect(agent.getSnapshot().status).toBe("stopped")
    for (const hold of holds) expect(hold.released).toBe(true)
    expect(s.get("agent:a1")).toBeUndefined()
    expect(s.get("service:agent:a1:x")).toBeUndefined()
    expect(s.get("service:agent:a1:y")).toBeUndefined()
    expect(Object.keys(s.actor.getSnapshot().context.agents)).toEqual(["a2"])
    expect(s.status(A2, "x")).toBe("healthy")
    expect(s.status(STORE_SCOPE, "x")).toBe("healthy")
    // the agent can come back
    s.add(A1, "x")
    await flush()
    expect(s.status(A1, "x")).toBe("healthy")
    expect(s.agent("a1")).not.toBe(agent)
  })

  it("stopping the store stops every actor and releases every connection", async () => {
    const s = startStore()
    s.add(STORE_SCOPE, "x")
    s.add(A1, "y")
    await flush()
    s.actor.stop()
    expect(s.fakes.calls.hold).toHaveLength(2)
    for (const hold of s.fakes.calls.hold) expect(hold.released).toBe(true)
  })
})

describe("a child actor that throws does not take its siblings down", () => {
  /** Snapshot of what must not change in a sibling. */
  const stateOf = (s: ReturnType<typeof startStore>, scope: Scope, name: string) => {
    const ref = s.serviceRef(scope, name)
    const ctx = ref.getSnapshot().context
    return { ref, status: statusOf(ref.getSnapshot()), transitions: ctx.transitions, connection: ctx.connection }
  }

  for (const scope of [STORE_SCOPE, A1]) {
    const where = scope.kind === "store" ? "store scope" : "agent scope"
    it(`${where}: the crashed service shows unreachable with the error, then is restarted after the crash backoff`, async () => {
      const s = startStore({ crashOnHold: { [labelOf(scope, "bad")]: 1 } })
      s.add(scope, "good1")
      s.add(scope, "good2")
      s.add(A2, "other")
      await flush()
      const before = ["good1", "good2"].map((n) => stateOf(s, scope, n))
      const other = stateOf(s, A2, "other")
      s.add(scope, "bad")
      const crashedRef = s.serviceRef(scope, "bad")
      await flush()

      // the parents are alive
      expect(s.errors).toEqual([])
      expect(s.actor.getSnapshot().status).toBe("active")
      if (scope.kind === "agent") expect(s.agent("a1")?.getSnapshot().status).toBe("active")
      // the siblings kept their actor and their state
      for (const [i, n] of ["good1", "good2"].entries()) {
        expect(stateOf(s, scope, n)).toEqual(before[i])
        expect(s.holds(scope, n)[0]?.released).toBe(false)
      }
      expect(stateOf(s, A2, "other")).toEqual(other)

      // the crashed one was replaced by a new actor under the same system id
      expect(crashedRef.getSnapshot().status).toBe("error")
      const restarted = s.serviceRef(scope, "bad")
      expect(restarted).not.toBe(crashedRef)
      expect(statusOf(restarted.getSnapshot())).toBe("unreachable")
      expect(restarted.getSnapshot().context.lastError).toBe(`boom in ${labelOf(scope, "bad")}`)
      expect(restarted.getSnapshot().context.transitions.at(-1)?.reason).toBe(`actor crashed: boom in ${labelOf(scope, "bad")}`)
      expect(s.crashes).toEqual([expect.objectContaining({ actorId: serviceSystemId(scope, "bad"), attempt: 1, message: `boom in ${labelOf(scope, "bad")}` })])
      const supervisor = scope.kind === "store" ? s.actor.getSnapshot().context : s.agent("a1")!.getSnapshot().context
      expect(supervisor.services["bad"]).toBe(restarted)
      expect(supervisor.crashes).toEqual({ bad: 1 })

      // after the crash backoff (1 s ± 10 %) it starts again, and connects
      const connects = s.fakes.calls.connect.length
      s.clock.increment(899)
      expect(statusOf(restarted.getSnapshot())).toBe("unreachable")
      s.clock.increment(1100 - 899)
      expect(statusOf(restarted.getSnapshot())).toBe("initializing")
      expect(s.fakes.calls.connect).toHaveLength(connects + 1)
      await flush()
      expect(statusOf(restarted.getSnapshot())).toBe("healthy")
      expect(s.serviceRef(scope, "bad")).toBe(restarted)
      // and it can be removed like any other
      s.remove(scope, "bad")
      expect(s.get(serviceSystemId(scope, "bad"))).toBeUndefined()
      expect(s.holds(scope, "bad").every((h) => h.released)).toBe(true)
    })
  }

  it("a service that keeps crashing is restarted with a growing backoff", async () => {
    const s = startStore({ crashOnHold: { "a1/bad": 3 } })
    s.add(A1, "good")
    s.add(A1, "bad")
    await flush()
    const delays: number[] = []
    for (let crash = 1; crash <= 3; crash++) {
      const ref = s.serviceRef(A1, "bad")
      expect(statusOf(ref.getSnapshot())).toBe("unreachable")
      const delay = ref.getSnapshot().context.nextDelayMs
      delays.push(delay)
      // whole milliseconds: a fractional delay can miss by a rounding error in SimulatedClock
      await s.advance(Math.ceil(delay) + 1)
    }
    expect(s.agent("a1")!.getSnapshot().context.crashes).toEqual({ bad: 3 })
    expect(delays[0]).toBeGreaterThanOrEqual(900)
    expect(delays[0]).toBeLessThanOrEqual(1100)
    expect(delays[1]).toBeGreaterThanOrEqual(1800)
    expect(delays[1]).toBeLessThanOrEqual(2200)
    expect(delays[2]).toBeGreaterThanOrEqual(3600)
    expect(delays[2]).toBeLessThanOrEqual(4400)
    expect(s.status(A1, "bad")).toBe("healthy")
    expect(s.status(A1, "good")).toBe("healthy")
    expect(s.fakes.calls.hold.filter((h) => !h.released)).toHaveLength(2)
  })

  for (const scope of [STORE_SCOPE, A1]) {
    for (const how of ["guard", "action"] as const) {
      const where = scope.kind === "store" ? "store scope" : "agent scope"
      it(`${where}: a service whose own code (${how}) throws while connected releases its held connection`, async () => {
        const s = startStore(how === "guard" ? { throwOnReport: ["bad"] } : { throwOnToolsListed: ["bad"] })
        s.add(scope, "good")
        s.add(scope, "bad")
        await flush()
        const [badHold] = s.holds(scope, "bad")
        const good = stateOf(s, scope, "good")
        if (how === "guard") {
          // a health report makes the bad service's guard throw: the service actor crashes
          s.serviceRef(scope, "bad").send({ type: "HEALTH_REPORT", ok: true, responseTimeMs: 5 })
        } else {
          // a tool refresh ends in an action that throws
          s.serviceRef(scope, "bad").send({ type: "REFRESH_TOOLS" })
          s.fakes.calls.list.at(-1)?.resolve([tool("new")])
        }
        await flush()
        expect(s.errors).toEqual([])
        expect(s.actor.getSnapshot().status).toBe("active")
        if (scope.kind === "agent") expect(s.agent("a1")?.getSnapshot().status).toBe("active")
        expect(stateOf(s, scope, "good")).toEqual(good)
        expect(s.status(scope, "bad")).toBe("unreachable")
        expect(s.serviceRef(scope, "bad").getSnapshot().context.lastError).toContain(`${how} failed in bad`)
        // the crashed actor's connection must not stay open
        expect(badHold?.released).toBe(true)
        // and after the restart only one connection per service is held
        await s.advance(1100)
        expect(s.status(scope, "bad")).toBe("healthy")
        expect(s.fakes.calls.hold.filter((h) => !h.released)).toHaveLength(2)
      })
    }
  }

  for (const scope of [STORE_SCOPE, A1]) {
    const where = scope.kind === "store" ? "store scope" : "agent scope"
    it(`${where}: a service that throws while starting is restarted, the supervisor survives`, async () => {
      const s = startStore({ throwOnStart: ["bad"] })
      s.add(scope, "good")
      await flush()
      const good = stateOf(s, scope, "good")
      s.add(scope, "bad")
      await flush()
      expect(s.errors).toEqual([])
      expect(s.actor.getSnapshot().status).toBe("active")
      if (scope.kind === "agent") {
        expect(s.agent("a1")?.getSnapshot().status).toBe("active")
        expect(s.get("agent:a1")).toBeDefined()
      }
      expect(stateOf(s, scope, "good")).toEqual(good)
      expect(s.status(scope, "bad")).toBe("unreachable")
      expect(s.serviceRef(scope, "bad").getSnapshot().context.lastError).toContain("start failed in bad")
      await s.advance(1100)
      expect(s.status(scope, "bad")).toBe("healthy")
    })
  }
})

describe("names that are Object.prototype keys (constructor, toString, __proto__ ...)", () => {
  for (const name of ["constructor", "toString", "valueOf", "hasOwnProperty"]) {
    it(`a store service named ${name} is added, supervised and removed`, async () => {
      const s = startStore()
      s.add(STORE_SCOPE, name)
      await flush()
      expect(s.errors).toEqual([])
      expect(s.actor.getSnapshot().status).toBe("active")
      expect(s.get(serviceSystemId(STORE_SCOPE, name))).toBeDefined()
      expect(s.status(STORE_SCOPE, name)).toBe("healthy")
      s.remove(STORE_SCOPE, name)
      expect(s.get(serviceSystemId(STORE_SCOPE, name))).toBeUndefined()
      expect(s.holds(STORE_SCOPE, name)[0]?.released).toBe(true)
    })
  }

  for (const id of ["constructor", "__proto__", "toString"]) {
    it(`an agent whose id is ${id} is created with its service and removed`, async () => {
      const s = startStore()
      s.add(agentScope(id), "x")
      await flush()
      expect(s.errors).toEqual([])
      expect(s.actor.getSnapshot().status).toBe("active")
      expect(s.agent(id)).toBeDefined()
      expect(s.status(agentScope(id), "x")).toBe("healthy")
      s.actor.send({ type: "REMOVE_AGENT", agentId: id })
      expect(s.agent(id)).toBeUndefined()
      expect(s.holds(agentScope(id), "x")[0]?.released).toBe(true)
    })
  }

  it("removing an unknown service or agent named constructor changes nothing", async () => {
    const s = startStore()
    s.add(STORE_SCOPE, "x")
    s.add(A1, "y")
    await flush()
    s.remove(STORE_SCOPE, "constructor")
    s.remove(A1, "constructor")
    s.remove(agentScope("constructor"), "y")
    s.actor.send({ type: "REMOVE_AGENT", agentId: "constructor" })
    await flush()
    expect(s.errors).toEqual([])
    expect(s.actor.getSnapshot().status).toBe("active")
    expect(s.agent("a1")?.getSnapshot().status).toBe("active")
    expect(s.status(STORE_SCOPE, "x")).toBe("healthy")
    expect(s.status(A1, "y")).toBe("healthy")
  })

  it("a crashed service named constructor is restarted after a 1 s backoff", async () => {
    const s = startStore({ crashOnHold: { "a1/constructor": 1 } })
    s.add(A1, "constructor")
    await flush()
    expect(s.agent("a1")?.getSnapshot().status).toBe("active")
    expect(s.status(A1, "constructor")).toBe("unreachable")
    expect(s.agent("a1")!.getSnapshot().context.crashes).toEqual({ constructor: 1 })
    const delay = s.serviceRef(A1, "constructor").getSnapshot().context.nextDelayMs
    expect(delay).toBeGreaterThanOrEqual(900)
    expect(delay).toBeLessThanOrEqual(1100)
    await s.advance(1101)
    expect(s.status(A1, "constructor")).toBe("healthy")
  })
})
