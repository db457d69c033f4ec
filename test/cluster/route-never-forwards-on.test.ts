/**
 * The owner's end of forwarding never sends a request on (src/http/cluster-route.ts): a request
 * that reached the replica while its actor ran the service, still connecting, waits for the
 * connection; when the actor turns into a mirror meanwhile (its lease lost) and shows another
 * owner's view, the connection it then has forwards, and the request is answered "not run" (sent
 * again by its replica to the next owner) rather than forwarded on, with no failed health check
 * counted. The route on a real HTTP server, a real replicated actor (its service machine on fakes),
 * a real forwarder signing the request, and a stand-in replica where a request sent on would land.
 */
import { createServer, type Server } from "node:http"
import { assign, createActor } from "xstate"
import { afterEach, describe, expect, it } from "vitest"
import { Forwarder, NotDelivered, RemoteConnection } from "../../src/cluster/forward.js"
import type { Cluster } from "../../src/cluster/cluster.js"
import { STORE_SCOPE } from "../../src/domain/service-definition.js"
import { defaultMonitoring } from "../../src/domain/settings.js"
import { clusterRoute } from "../../src/http/cluster-route.js"
import { replicatedServiceMachine, viewOf, type ReplicatedEvent } from "../../src/machines/replicated.js"
import { initialServiceContext, serviceMachine, statusOf } from "../../src/machines/service.js"
import type { Store } from "../../src/runtime/store.js"
import { createFakes, flush, standInReplica, within } from "../support/index.js"

const SECRET = "0123456789abcdef0123456789abcdef"
const input = { scope: STORE_SCOPE, name: "svc", definition: { url: "http://127.0.0.1:1/mcp" }, settings: defaultMonitoring({}), now: () => Date.now(), random: () => 0.5 }

const stops: Array<() => void> = []
afterEach(() => {
  for (const stop of stops.splice(0)) stop()
})

describe("the forwarding route", () => {
  it("answers \"not run\" when the actor turned into a mirror while the request waited for the service to connect", async () => {
    // Where the actor's forwarding connection would send the request on.
    const elsewhere = await standInReplica((_, res) => res.end(`${JSON.stringify({ r: { sentOn: true } })}\n`))
    const onward = new Forwarder({ secret: SECRET, maxAnswerBytes: 1 << 20, ownerUrl: async () => elsewhere.url })
    const remote = new RemoteConnection("store/svc", onward, () => undefined)
    const fakes = createFakes()
    const machine = replicatedServiceMachine.provide({
      actors: { service: serviceMachine.provide({ actors: fakes.actors }) },
      actions: { useRemote: assign({ connection: remote }), forward: () => undefined, publish: () => undefined }
    })
    const actor = createActor(machine, { input })
    actor.start()
    // What the route sends the actor, and when a wait for its snapshot starts (the request waits for the connection).
    const sent: ReplicatedEvent[] = []
    const send = actor.send.bind(actor)
    actor.send = (event: ReplicatedEvent) => {
      sent.push(event)
      send(event)
    }
    let waiting = () => undefined as void
    const waited = new Promise<void>((resolve) => (waiting = resolve))
    const subscribe = actor.subscribe.bind(actor) as (observer: unknown) => ReturnType<typeof actor.subscribe>
    actor.subscribe = ((observer: unknown) => {
      waiting()
      return subscribe(observer)
    }) as typeof actor.subscribe

    // This replica took the lease: the service connects (the connect held).
    actor.send({ type: "OWN", owner: "me" })
    await flush()
    expect(fakes.calls.connect).toHaveLength(1)
    expect(actor.getSnapshot().context.connection).toBeUndefined()
    expect(statusOf(actor.getSnapshot())).toBe("initializing")

    const parts = { store: { serviceActor: () => actor } as unknown as Store, cluster: { secret: SECRET, owns: () => true } as unknown as Cluster, asyncAnswer: undefined as never }
    const route = clusterRoute(() => parts, 1 << 20)
    const server: Server = createServer((req, res) => {
      if (!route(req, res)) res.writeHead(404).end()
    })
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
    const address = server.address()
    const url = `http://127.0.0.1:${typeof address === "object" && address !== null ? address.port : 0}`
    const caller = new Forwarder({ secret: SECRET, maxAnswerBytes: 1 << 20, ownerUrl: async () => url })
    stops.push(() => {
      caller.close()
      onward.close()
      elsewhere.close()
      server.closeAllConnections()
      server.close()
      actor.stop()
    })

    const answer = caller.sendTo(url, { op: "call", field: "store/svc", tool: "echo", args: { text: "hi" }, timeoutMs: 10_000 }, {}).then(
      (value) => ({ value }),
      (error: unknown) => ({ error })
    )
    // The request waits for the service to connect; meanwhile the lease is lost and another owner's view shown.
    await within(waited, 5000, "the request's wait for the connection")
    actor.send({ type: "DISOWN" })
    actor.send({ type: "VIEW", view: viewOf({ ...initialServiceContext(input), status: "healthy" }, "healthy"), owner: "other" })
    await flush()
    expect(actor.getSnapshot().context.connection).toBe(remote)
    expect(statusOf(actor.getSnapshot())).toBe("healthy")

    const ended = await answer
    expect("error" in ended ? ended.error : ended.value).toBeInstanceOf(NotDelivered)
    expect(elsewhere.received).toEqual([])
    expect(sent.filter((e) => e.type === "HEALTH_REPORT")).toEqual([])
  })
})
