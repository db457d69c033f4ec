/**
 * The replicated service machine (src/machines/replicated.ts), with the real service machine as its
 * child and fake side effects (test/support/machines.ts): mirroring, a published view (through JSON,
 * as it travels through Redis) puts it in the owner's status with the owner's figures and never
 * carries the connection; it ignores what only an owner acts on and passes on what only an owner can
 * do; owning, it runs the service machine, shows and publishes each of its snapshots, and passes it
 * every service event; DISOWN stops the child; a crash of the child restarts it with backoff; and
 * the actor (what waits subscribe to) stays the same through every role change.
 */
import { assign, createActor, SimulatedClock } from "xstate"
import { describe, expect, it } from "vitest"
import { STATUSES, STORE_SCOPE } from "../../src/domain/service-definition.js"
import { defaultMonitoring } from "../../src/domain/settings.js"
import { OWNED_CHILD_ID, replicatedServiceMachine, viewOf, type PublishedView, type ReplicatedEvent } from "../../src/machines/replicated.js"
import type { CrashReport } from "../../src/machines/supervisor.js"
import { initialServiceContext, serviceMachine, statusOf, type ServiceContext } from "../../src/machines/service.js"
import { createFakes, fakeConnection, flush, tool } from "../support/index.js"

const input = { scope: STORE_SCOPE, name: "svc", definition: { url: "http://127.0.0.1:1/mcp" }, settings: defaultMonitoring({}), now: () => 1000, random: () => 0.5 }

/** An owner's context with figures in every field a view carries, and a connection that must not travel. */
const ownerContext = (): ServiceContext => ({
  ...initialServiceContext(input),
  status: "healthy",
  reason: "health check passed",
  connection: { secret: "not for the wire" } as unknown as ServiceContext["connection"],
  tools: [{ name: "echo", description: "Returns the text", inputSchema: { type: "object" } }] as unknown as ServiceContext["tools"],
  toolsVersion: 3,
  consecutiveSuccesses: 2,
  lastHealthCheckAt: 1500,
  responseTimeMs: 4.2,
  transitions: [{ from: "initializing", to: "healthy", at: 1200, reason: "connected" }]
})

const travelled = (view: PublishedView): PublishedView => JSON.parse(JSON.stringify(view)) as PublishedView

/** A replicated actor whose child is the service machine on fakes, with a record of what it forwarded and published. */
const start = () => {
  const fakes = createFakes()
  const remote = fakeConnection("remote")
  const forwarded: ReplicatedEvent[] = []
  const published: PublishedView[] = []
  const clock = new SimulatedClock()
  const machine = replicatedServiceMachine.provide({
    actors: { service: serviceMachine.provide({ actors: fakes.actors }) },
    actions: {
      useRemote: assign({ connection: remote }),
      forward: ({ event }) => void forwarded.push(event),
      publish: ({ event }) => {
        if (event.type === "VIEW" && event.local === true) published.push(event.view)
      }
    }
  })
  const actor = createActor(machine, { input, clock })
  actor.start()
  return { actor, fakes, remote, forwarded, published, clock, status: () => statusOf(actor.getSnapshot()) }
}

describe("replicated service machine, mirroring", () => {
  it("starts initializing and takes the owner's status and figures from each view, connection left out", () => {
    const { actor, remote } = start()
    expect(statusOf(actor.getSnapshot())).toBe("initializing")
    expect(actor.getSnapshot().context.role).toBe("mirror")
    const owner = ownerContext()
    const view = travelled(viewOf(owner, "healthy"))
    expect(JSON.stringify(view)).not.toContain("not for the wire")
    actor.send({ type: "VIEW", view, owner: "replica-b" })
    const context = actor.getSnapshot().context
    expect(statusOf(actor.getSnapshot())).toBe("healthy")
    // The connection is the forwarding one, never the owner's (which does not travel).
    expect(context.connection).toBe(remote)
    expect(context.owner).toBe("replica-b")
    expect(context.name).toBe("svc")
    expect(context.tools).toEqual(owner.tools)
    expect(context.toolsVersion).toBe(3)
    expect(context.transitions).toEqual(owner.transitions)
    expect(context.responseTimeMs).toBe(4.2)
    actor.stop()
  })

  it("follows every status, ignores what the owner does by itself and passes on what only the owner can do", () => {
    const { actor, forwarded, fakes } = start()
    for (const status of STATUSES) {
      actor.send({ type: "VIEW", view: travelled(viewOf({ ...ownerContext(), status }, status)), owner: "b" })
      expect(statusOf(actor.getSnapshot())).toBe(status)
    }
    const before = actor.getSnapshot()
    actor.send({ type: "HEALTH_REPORT", ok: false, error: "x" })
    actor.send({ type: "DISCONNECT" })
    actor.send({ type: "TRANSPORT_CLOSED", reason: "x" })
    // A restart every replica applies from the definitions is left to the owner's own replica.
    actor.send({ type: "RESTART", reason: "enabled in the services file", fromDefinitions: true })
    expect(actor.getSnapshot().context).toBe(before.context)
    expect(forwarded).toEqual([])
    actor.send({ type: "RESTART", reason: "asked" })
    actor.send({ type: "REFRESH_TOOLS" })
    actor.send({ type: "AUTHORIZED" })
    expect(forwarded.map((e) => e.type)).toEqual(["RESTART", "REFRESH_TOOLS", "AUTHORIZED"])
    // A view published locally (by a child it does not run) is not taken.
    actor.send({ type: "VIEW", view: viewOf({ ...ownerContext(), status: "warning" }, "warning"), local: true })
    expect(statusOf(actor.getSnapshot())).toBe("disconnected")
    expect(fakes.calls.connect).toHaveLength(0)
    actor.stop()
  })
})

describe("replicated service machine, owning", () => {
  it("runs the service machine, shows and publishes its snapshots, passes it every service event, and stops it on DISOWN", async () => {
    const { actor, fakes, published, remote, clock } = start()
    actor.send({ type: "VIEW", view: travelled(viewOf({ ...ownerContext(), status: "healthy" }, "healthy")), owner: "old-owner" })
    const seen: string[] = []
    const subscription = actor.subscribe((s) => seen.push(statusOf(s)))
    actor.send({ type: "OWN", owner: "me" })
    expect(actor.getSnapshot().context.role).toBe("owner")
    expect(actor.getSnapshot().context.owner).toBe("me")
    expect(fakes.calls.connect).toHaveLength(1)
    const connection = fakeConnection("real")
    fakes.calls.connect[0]?.resolve({ connection, tools: [tool("a"), tool("b")] })
    await flush()
    expect(statusOf(actor.getSnapshot())).toBe("healthy")
    expect(actor.getSnapshot().context.connection).toBe(connection)
    expect(actor.getSnapshot().context.tools.map((t) => t.name)).toEqual(["a", "b"])
    expect(published.at(-1)?.status).toBe("healthy")
    expect(JSON.stringify(published.at(-1))).not.toContain("real")
    // A health check started changes nothing shown: nothing published; its answer is.
    const publishedBefore = published.length
    clock.increment(15_000)
    await flush()
    expect(fakes.calls.check).toHaveLength(1)
    expect(published).toHaveLength(publishedBefore)
    fakes.calls.check[0]?.sendBack({ type: "HEALTH_REPORT", ok: true, responseTimeMs: 3 })
    await flush()
    expect(published).toHaveLength(publishedBefore + 1)
    expect(published.at(-1)?.responseTimeMs).toBe(3)
    // A view from another replica is not taken while this one runs the service.
    actor.send({ type: "VIEW", view: viewOf({ ...ownerContext(), status: "unreachable" }, "unreachable"), owner: "other" })
    expect(statusOf(actor.getSnapshot())).toBe("healthy")
    // Service events go to the child: a disconnect closes the connection there.
    actor.send({ type: "DISCONNECT", reason: "asked" })
    expect(statusOf(actor.getSnapshot())).toBe("disconnecting")
    expect(fakes.calls.close).toHaveLength(1)
    fakes.calls.close[0]?.resolve()
    await flush()
    expect(statusOf(actor.getSnapshot())).toBe("disconnected")
    actor.send({ type: "RESTART" })
    expect(fakes.calls.connect).toHaveLength(2)
    fakes.calls.connect[1]?.resolve({ connection: fakeConnection("again"), tools: [tool("a")] })
    await flush()
    expect(statusOf(actor.getSnapshot())).toBe("healthy")
    const holds = fakes.calls.hold.length
    actor.send({ type: "DISOWN" })
    expect(actor.getSnapshot().context.role).toBe("mirror")
    expect(fakes.calls.hold[holds - 1]?.released).toBe(true)
    expect((actor.getSnapshot().children as Record<string, unknown>)[OWNED_CHILD_ID]).toBeUndefined()
    expect(actor.getSnapshot().context.connection).toBe(remote)
    // Mirroring again: the new owner's views are taken.
    actor.send({ type: "VIEW", view: travelled(viewOf({ ...ownerContext(), status: "reconnecting" }, "reconnecting")), owner: "new-owner" })
    expect(statusOf(actor.getSnapshot())).toBe("reconnecting")
    subscription.unsubscribe()
    expect(seen).toContain("initializing")
    expect(seen).toContain("disconnected")
    expect(seen.at(-1)).toBe("reconnecting")
    expect(actor.getSnapshot().status).toBe("active")
    actor.stop()
  })

  it("restarts a crashed child, unreachable with the error until its backoff passes", async () => {
    const fakes = createFakes({ onHold: () => { throw new Error("boom") } })
    const clock = new SimulatedClock()
    const reported: CrashReport[] = []
    const machine = replicatedServiceMachine.provide({
      actors: { service: serviceMachine.provide({ actors: fakes.actors }) },
      actions: { reportCrash: (_, report) => void reported.push(report) }
    })
    const actor = createActor(machine, { input, clock }).start()
    actor.send({ type: "OWN", owner: "me" })
    fakes.calls.connect[0]?.resolve({ connection: fakeConnection(), tools: [] })
    await flush()
    expect(actor.getSnapshot().status).toBe("active")
    expect(statusOf(actor.getSnapshot())).toBe("unreachable")
    expect(actor.getSnapshot().context.crash).toEqual({ error: "boom", attempt: 1 })
    expect(reported).toEqual([expect.objectContaining({ actorId: "service:store:svc", attempt: 1, message: "boom" })])
    expect(actor.getSnapshot().context.lastError).toBe("boom")
    actor.stop()
  })
})
