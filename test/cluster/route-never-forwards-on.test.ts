/**
 * The owner's end of forwarding never sends a request on (src/http/cluster-route.ts): a request
 * that reached the replica while its actor ran the service, still connecting, waits for the
 * connection; when the actor turns into a mirror meanwhile (its lease lost) and shows another
 * owner's view, the connection it then has forwards, and the request is answered "not run" (sent
 * again by its replica to the next owner) rather than forwarded on, with no failed health check
 * counted. A `per_user` service's request runs on its caller's own pooled connection, which never
 * forwards: when the lease is lost (or the actor mirrors) while its caller's credential is read, it
 * is answered "not run" too, never run on the principal's connection. The route on a real HTTP
 * server, a real replicated actor (its service machine on fakes), a real forwarder signing the
 * request, the real pool of principals' connections, and a stand-in replica where a request sent
 * on would land. A replica of another cluster (the same secret), and a request sent to another
 * replica's address, are answered 421 and nothing runs.
 */
import { randomUUID } from "node:crypto"
import { createServer, type RequestListener } from "node:http"
import { assign, createActor } from "xstate"
import { afterEach, describe, expect, it } from "vitest"
import { FORWARD_PATH, Forwarder, NotDelivered, RemoteConnection } from "../../src/cluster/forward.js"
import { sign, SIGNATURE_HEADER } from "../../src/cluster/signature.js"
import type { Cluster } from "../../src/cluster/cluster.js"
import { CredentialsFile, type CredentialStore } from "../../src/config/credentials-file.js"
import { STORE_SCOPE, type ServiceDefinition } from "../../src/domain/service-definition.js"
import { defaultMonitoring } from "../../src/domain/settings.js"
import { clusterRoute } from "../../src/http/cluster-route.js"
import { replicatedServiceMachine, viewOf, type ReplicatedEvent } from "../../src/machines/replicated.js"
import { initialServiceContext, serviceMachine, statusOf } from "../../src/machines/service.js"
import { UserCredentials } from "../../src/runtime/user-credentials.js"
import type { Store } from "../../src/runtime/store.js"
import { createFakes, fakeConnection, flush, forwarderTo, standInReplica, within } from "../support/index.js"

const SECRET = "0123456789abcdef0123456789abcdef"
const inputOf = (definition: ServiceDefinition) => ({ scope: STORE_SCOPE, name: "svc", definition, settings: defaultMonitoring({}), now: () => Date.now(), random: () => 0.5 })

const stops: Array<() => void> = []

/** A server for `handle` on a free loopback port, and a forwarder of cluster "test" that sends to it; both ended after the test. */
const served = async (handle: RequestListener): Promise<{ readonly url: string; readonly forwarder: Forwarder }> => {
  const { url, forwarder, stop } = await forwarderTo(createServer(handle), SECRET)
  stops.push(stop)
  return { url, forwarder }
}
afterEach(() => {
  for (const stop of stops.splice(0)) stop()
})

/**
 * A replica's route on a real HTTP server over one replicated actor (taken over here: its connect
 * held), whose mirror's connection would send a request on to a stand-in replica; `owns` is the
 * cluster's answer for the lease, `credentials` the store's pool of principals' connections.
 */
const replicaOf = async (definition: ServiceDefinition, owns: () => boolean, credentials?: UserCredentials) => {
  const input = inputOf(definition)
  // Where the actor's forwarding connection would send the request on.
  const elsewhere = await standInReplica((_, res) => res.end(`${JSON.stringify({ r: { sentOn: true } })}\n`))
  const onward = new Forwarder({ cluster: "test", secret: SECRET, maxAnswerBytes: 1 << 20, ownerUrl: async () => elsewhere.url })
  const remote = new RemoteConnection("store/svc", onward, () => undefined)
  const fakes = createFakes()
  const machine = replicatedServiceMachine.provide({
    actors: { service: serviceMachine.provide({ actors: fakes.actors }) },
    actions: { useRemote: assign({ connection: remote }), forward: () => undefined, publish: () => undefined }
  })
  const actor = createActor(machine, { input })
  actor.start()
  // What the route sends the actor.
  const sent: ReplicatedEvent[] = []
  const send = actor.send.bind(actor)
  actor.send = (event: ReplicatedEvent) => {
    sent.push(event)
    send(event)
  }
  // This replica took the lease: the service connects (the connect held).
  actor.send({ type: "OWN", owner: "me" })
  await flush()
  expect(fakes.calls.connect).toHaveLength(1)

  const parts = { store: { serviceActor: () => actor, credentials } as unknown as Store, cluster: { secret: SECRET, owns, options: { name: "test" } } as unknown as Cluster, asyncAnswer: undefined as never }
  const route = clusterRoute(() => parts, 1 << 20)
  const { url, forwarder: caller } = await served((req, res) => {
    if (!route(req, res)) res.writeHead(404).end()
  })
  // The address it is reached at is the one it advertises (a request sent to another is refused).
  Object.assign(parts.cluster, { advertiseUrl: url })
  stops.push(() => {
    onward.close()
    elsewhere.close()
    actor.stop()
  })
  return {
    url,
    actor,
    fakes,
    remote,
    elsewhere,
    sent,
    /** A call sent to the route as another replica sends it (for `principal`, if given): its value, or its failure. */
    forward: (principal?: string) =>
      caller.sendTo(url, { op: "call", field: "store/svc", tool: "echo", args: { text: "hi" }, timeoutMs: 10_000, ...(principal === undefined ? {} : { principal }) }, {}).then(
        (value) => ({ value }),
        (error: unknown) => ({ error })
      ),
    /** The lease lost: the actor mirrors and shows another owner's view. */
    disown: async () => {
      actor.send({ type: "DISOWN" })
      actor.send({ type: "VIEW", view: viewOf({ ...initialServiceContext(input), status: "healthy" }, "healthy"), owner: "other" })
      await flush()
      expect(actor.getSnapshot().context.connection).toBe(remote)
      expect(statusOf(actor.getSnapshot())).toBe("healthy")
    }
  }
}

describe("the forwarding route", () => {
  it("answers \"not run\" when the actor turned into a mirror while the request waited for the service to connect", async () => {
    const replica = await replicaOf({ url: "http://127.0.0.1:1/mcp" }, () => true)
    const { actor } = replica
    expect(actor.getSnapshot().context.connection).toBeUndefined()
    expect(statusOf(actor.getSnapshot())).toBe("initializing")
    // When a wait for the actor's snapshot starts (the request waits for the connection).
    let waiting = () => undefined as void
    const waited = new Promise<void>((resolve) => (waiting = resolve))
    const subscribe = actor.subscribe.bind(actor) as (observer: unknown) => ReturnType<typeof actor.subscribe>
    actor.subscribe = ((observer: unknown) => {
      waiting()
      return subscribe(observer)
    }) as typeof actor.subscribe

    const answer = replica.forward()
    // The request waits for the service to connect; meanwhile the lease is lost and another owner's view shown.
    await within(waited, 5000, "the request's wait for the connection")
    await replica.disown()

    const ended = await answer
    expect("error" in ended ? ended.error : ended.value).toBeInstanceOf(NotDelivered)
    expect(replica.elsewhere.received).toEqual([])
    expect(replica.sent.filter((e) => e.type === "HEALTH_REPORT")).toEqual([])
  })

  it("answers 421 to a replica of another cluster that shares the secret, running nothing: the sender counts it not delivered, no replica of its cluster there", async () => {
    const replica = await replicaOf({ url: "http://127.0.0.1:1/mcp" }, () => true)
    const stranger = new Forwarder({ cluster: "another", secret: SECRET, maxAnswerBytes: 1 << 20, ownerUrl: async () => replica.url })
    stops.push(() => stranger.close())
    const sent = await stranger.sendTo(replica.url, { op: "call", field: "store/svc", tool: "echo", args: { text: "hi" }, timeoutMs: 10_000 }, {}).then(
      () => undefined,
      (e: unknown) => e
    )
    expect(sent).toBeInstanceOf(NotDelivered)
    expect((sent as NotDelivered).refused).toBe(true)
    expect((sent as Error).message).toContain("another cluster")
    // Its own cluster's request is taken (it waits for the service, held connecting, until the lease goes).
    const own = replica.forward()
    await replica.disown()
    const ended = await own
    expect("error" in ended ? ended.error : ended.value).toBeInstanceOf(NotDelivered)
    expect(replica.elsewhere.received).toEqual([])
  })

  it("answers 421 to a signed request sent to another replica's address (one seen on the network, sent again here), running nothing", async () => {
    const replica = await replicaOf({ url: "http://127.0.0.1:1/mcp" }, () => true)
    const body = JSON.stringify({ op: "call", field: "store/svc", tool: "echo", args: { text: "hi" }, timeoutMs: 5_000, id: randomUUID(), cluster: "test", to: "http://127.0.0.1:9/" })
    const res = await fetch(new URL(FORWARD_PATH, replica.url), { method: "POST", headers: { "content-type": "application/json", [SIGNATURE_HEADER]: sign(SECRET, "POST", FORWARD_PATH, body) }, body })
    expect(res.status).toBe(421)
    expect(await res.json()).toMatchObject({ error: { code: "MISDIRECTED_REQUEST" } })
    // Nothing sent to the actor but its own taking of the lease.
    expect(replica.sent).toEqual([{ type: "OWN", owner: "me" }])
  })

  it("takes a 421 that is not the forwarding route's own (a proxy's) as a refusal, not as a replica gone", async () => {
    const { url, forwarder: sender } = await served((_, res) => res.writeHead(421, { "content-type": "text/plain" }).end("Misdirected Request"))
    const sent = await sender.sendTo(url, { op: "ping", field: "store/svc", timeoutMs: 5_000 }, {}).then(
      () => undefined,
      (e: unknown) => e
    )
    expect(sent).not.toBeInstanceOf(NotDelivered)
    expect((sent as Error).message).toContain("HTTP 421")
  })

  // Both happen when a lease is lost, in either order: the lease (Redis) first, or the actor's DISOWN.
  it.each(["the lease", "the actor's role"] as const)(
    "answers \"not run\" to a per_user request when %s changed while its caller's credential was read",
    async (lost) => {
      let owned = true
      // The principal's credential, read where it is shared (Redis in replica mode): the read held until released.
      const file = CredentialsFile.inMemory()
      let reading = () => undefined as void
      const read = new Promise<void>((resolve) => (reading = resolve))
      let release = () => undefined as void
      const released = new Promise<void>((resolve) => (release = resolve))
      const shared: CredentialStore = {
        find: async (service, principal) => {
          reading()
          await released
          return file.find(service, principal)
        },
        put: (service, principal, credential) => file.put(service, principal, credential),
        remove: (service, principal) => file.remove(service, principal),
        forget: (service) => file.forget(service)
      }
      // The principal's own connections, each recording the tools called on it.
      const opened: string[] = []
      const called: string[] = []
      const credentials = new UserCredentials(
        Promise.resolve(shared),
        async (_target, _values, _timeoutMs, _signal, principal) => {
          opened.push(principal)
          return { ...fakeConnection(`own-${principal}`), callTool: async (name: string) => (called.push(name), { content: [] }) }
        },
        async () => undefined
      )
      stops.push(() => void credentials.closeAll())
      await credentials.set(STORE_SCOPE, "svc", "p1", { headers: { Authorization: "Bearer p1-own" }, env: {} })

      const replica = await replicaOf({ url: "http://127.0.0.1:1/mcp", per_user: { headers: ["Authorization"] } }, () => owned, credentials)
      // The service connected here: the request finds its connection at once, then reads the caller's credential.
      replica.fakes.calls.connect[0]?.resolve({ connection: fakeConnection(), tools: [] })
      await flush()
      expect(statusOf(replica.actor.getSnapshot())).toBe("healthy")

      const answer = replica.forward("p1")
      await within(read, 5000, "the read of the caller's credential")
      if (lost === "the lease") owned = false
      else await replica.disown()
      release()

      const ended = await answer
      expect("error" in ended ? ended.error : ended.value).toBeInstanceOf(NotDelivered)
      // Its own connection was opened (the request got that far), and nothing was called on it.
      expect(opened).toEqual(["p1"])
      expect(called).toEqual([])
      expect(replica.elsewhere.received).toEqual([])
      expect(replica.sent.filter((e) => e.type === "HEALTH_REPORT")).toEqual([])
    }
  )
})
