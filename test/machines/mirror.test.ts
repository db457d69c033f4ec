/**
 * The mirror machine (src/machines/mirror.ts): a published view, through JSON as it travels through
 * Redis, puts the mirror in the owner's status (read by `statusOf`, from the tags) with the owner's
 * figures; every other service event leaves it as it is; the view never carries the connection.
 */
import { createActor } from "xstate"
import { describe, expect, it } from "vitest"
import { STATUSES, STORE_SCOPE } from "../../src/domain/service.js"
import { defaultMonitoring } from "../../src/domain/settings.js"
import { mirrorMachine, viewOf, type PublishedView } from "../../src/machines/mirror.js"
import { initialServiceContext, statusOf, type ServiceContext } from "../../src/machines/service.js"

const input = { scope: STORE_SCOPE, name: "svc", definition: { url: "http://127.0.0.1:1/mcp" }, settings: defaultMonitoring({}), now: () => 1000 }

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

describe("mirror machine", () => {
  it("starts initializing and takes the owner's status and figures from each view, connection left out", () => {
    const mirror = createActor(mirrorMachine, { input }).start()
    expect(statusOf(mirror.getSnapshot())).toBe("initializing")
    const owner = ownerContext()
    const view = travelled(viewOf(owner, "healthy"))
    expect(JSON.stringify(view)).not.toContain("not for the wire")
    mirror.send({ type: "VIEW", view })
    const context = mirror.getSnapshot().context
    expect(statusOf(mirror.getSnapshot())).toBe("healthy")
    expect(context.connection).toBeUndefined()
    expect(context.name).toBe("svc")
    expect(context.tools).toEqual(owner.tools)
    expect(context.toolsVersion).toBe(3)
    expect(context.transitions).toEqual(owner.transitions)
    expect(context.responseTimeMs).toBe(4.2)
    mirror.stop()
  })

  it("follows every status, and ignores the events only an owner acts on", () => {
    const mirror = createActor(mirrorMachine, { input }).start()
    for (const status of STATUSES) {
      mirror.send({ type: "VIEW", view: travelled(viewOf({ ...ownerContext(), status }, status)) })
      expect(statusOf(mirror.getSnapshot())).toBe(status)
    }
    const before = mirror.getSnapshot()
    mirror.send({ type: "RESTART" })
    mirror.send({ type: "HEALTH_REPORT", ok: false, error: "x" })
    mirror.send({ type: "DISCONNECT" })
    expect(mirror.getSnapshot().value).toEqual(before.value)
    expect(mirror.getSnapshot().context).toBe(before.context)
    mirror.stop()
  })

  it("tells its subscribers of each view, as a wait on a live service is told", () => {
    const mirror = createActor(mirrorMachine, { input }).start()
    const seen: string[] = []
    const subscription = mirror.subscribe((s) => seen.push(statusOf(s)))
    mirror.send({ type: "VIEW", view: travelled(viewOf(ownerContext(), "reconnecting")) })
    mirror.send({ type: "VIEW", view: travelled(viewOf(ownerContext(), "healthy")) })
    subscription.unsubscribe()
    expect(seen).toEqual(["reconnecting", "healthy"])
    mirror.stop()
  })
})
