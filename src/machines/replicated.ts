/**
 * A service in replica mode (docs/replicas.md): the actor every replica has for each service, in
 * the store's tree where a plain service actor would be, with the same context shape and status
 * tags, so `statusOf`, the views, the waits (src/runtime/bridge.ts), calls and lists read it as they
 * read a live service. It plays one of two roles, swapped by the service's lease:
 *
 * - `mirroring` (another replica owns the service): no connection, no timer, no side effect of its
 *   own. Each `VIEW` the owner publishes puts it in the owner's status with the owner's figures;
 *   its `connection` is the runtime's forwarding connection to the owner (`useRemote`), and the
 *   commands only an owner can carry out (restart, tool refresh, an authorization) are passed on to
 *   it (`forward`). Events the owner acts on by itself are ignored.
 * - `owning` (this replica holds the lease): it invokes the real service machine (src/machines/
 *   service.ts), passes it every service event, and takes each of its snapshots as a local `VIEW`,
 *   which it also hands to `publish`. A crash of that child restarts it with backoff, as a
 *   supervisor does.
 *
 * The actor keeps its identity across role changes, so a wait or a subscription on it never ends
 * because the service moved between replicas. The side effects (`useRemote`, `forward`, `publish`)
 * are named placeholders supplied by src/runtime/store.ts; by default they do nothing.
 */
import { assign, raise, sendTo, setup, type ActorRefFrom, type AnyActorRef } from "xstate"
import { STATUSES, type Status } from "../domain/service-definition.js"
import type { McpConnection } from "../mcp/types.js"
import { initialServiceContext, serviceMachine, statusOf, type ServiceContext, type ServiceEvent, type ServiceInput, type ServiceSnapshot } from "./service.js"
import { crashMessage, serviceSystemId, stopOrphans, type CrashReport } from "./supervisor.js"

/** What an owner publishes of a service actor: its context without the connection and the local-only parts (JSON-safe). */
export type PublishedView = Omit<ServiceContext, "scope" | "name" | "settings" | "now" | "random" | "connection"> & { readonly status: Status }

/** The published view of a service actor's context in `status`. */
export const viewOf = (context: ServiceContext, status: Status): PublishedView => {
  const { scope: _s, name: _n, settings: _t, now: _w, random: _r, connection: _c, role: _o, owner: _p, ...view } = context as ServiceContext & Partial<ReplicaFields>
  return { ...view, status }
}

/** Context fields that are not part of what the actor shows (they never change, or are the child's own). */
const NOT_SHOWN: ReadonlySet<string> = new Set(["scope", "name", "settings", "now", "random", "role", "owner"])

/** Whether the actor shows the child's context already (every shown field the same value). */
const shows = (shown: ReplicatedContext, child: ServiceContext): boolean => {
  for (const key of Object.keys(child)) {
    if (!NOT_SHOWN.has(key) && (shown as unknown as Record<string, unknown>)[key] !== (child as unknown as Record<string, unknown>)[key]) return false
  }
  return true
}

/** What the replicated actor keeps beside a service's context. */
export interface ReplicaFields {
  /** `owner` while this replica runs the service, `mirror` while another does. */
  readonly role: "owner" | "mirror"
  /** The replica that published the view shown (this one while owning); undefined before any view. */
  readonly owner: string | undefined
}

export type ReplicatedContext = ServiceContext & ReplicaFields

export type ReplicatedEvent =
  | ServiceEvent
  /** A view of the service: published by its owner (`local` false), or taken from the child here (`local` true). */
  | { readonly type: "VIEW"; readonly view: PublishedView; readonly owner?: string | undefined; readonly local?: boolean; readonly connection?: McpConnection | undefined }
  /** This replica took the service's lease: run the service here. */
  | { readonly type: "OWN"; readonly owner: string }
  /** This replica gave the lease up or lost it: stop the service here and mirror its owner. */
  | { readonly type: "DISOWN" }

/** The id of the service actor invoked while owning. */
export const OWNED_CHILD_ID = "owned"

/** The service events an owning actor passes to its child. */
const SERVICE_EVENTS = [
  "TRANSPORT_CLOSED",
  "HEALTH_REPORT",
  "TOOLS_CHANGED",
  "CATALOG_CHANGED",
  "REFRESH_TOOLS",
  "DISCONNECT",
  "RESTART",
  "UPDATE_DEFINITION",
  "AUTH_CHANGED",
  "AUTH_REQUIRED",
  "AUTHORIZED"
] as const satisfies ReadonlyArray<ServiceEvent["type"]>

const toChild = sendTo(OWNED_CHILD_ID, ({ event }: { event: ReplicatedEvent }) => event as ServiceEvent)

export const replicatedServiceMachine = setup({
  types: {
    context: {} as ReplicatedContext,
    events: {} as ReplicatedEvent,
    input: {} as ServiceInput
  },
  actors: { service: serviceMachine },
  actions: {
    /** Sets `connection` to the connection that forwards to the owner (supplied by the runtime). */
    useRemote: assign({ connection: undefined }),
    /** Passes a command only the owner can carry out to the owner (supplied by the runtime). */
    forward: (_: { context: ReplicatedContext; event: ReplicatedEvent }) => undefined,
    /** Publishes a view taken from the child (supplied by the runtime). */
    publish: (_: { context: ReplicatedContext; event: ReplicatedEvent }) => undefined,
    applyView: assign(({ context, event }) => {
      if (event.type !== "VIEW") return {}
      return event.local === true
        ? { ...event.view, connection: event.connection }
        : { ...event.view, connection: context.connection, owner: event.owner }
    }),
    /** Tells the operator of the child's crash (supplied by the runtime; nothing by default). */
    reportCrash: (_, _report: CrashReport) => undefined,
    childCrashed: assign(({ context, event, self }) => {
      const message = crashMessage((event as { error?: unknown }).error)
      const attempt = (context.crash?.attempt ?? 0) + 1
      // XState leaves the children of an actor whose transition threw running: stop them now.
      const child = (self.getSnapshot() as { children: Record<string, AnyActorRef | undefined> }).children[OWNED_CHILD_ID]
      if (child !== undefined) stopOrphans(child)
      return { crash: { error: message, attempt } }
    })
  },
  guards: {
    byUser: ({ event }) => !(event.type === "RESTART" && event.fromDefinitions === true)
  }
}).createMachine({
  id: "replicated",
  context: ({ input }) => ({ ...initialServiceContext(input), role: "mirror", owner: undefined }),
  type: "parallel",
  states: {
    role: {
      initial: "mirroring",
      states: {
        mirroring: {
          entry: [assign({ role: "mirror" }), "useRemote"],
          on: {
            OWN: "owning",
            RESTART: { guard: "byUser", actions: "forward" },
            REFRESH_TOOLS: { actions: "forward" },
            AUTHORIZED: { actions: "forward" },
            UPDATE_DEFINITION: { actions: assign(({ event }) => ({ definition: event.definition })) }
          }
        },
        owning: {
          entry: assign(({ event }) => ({ role: "owner" as const, ...(event.type === "OWN" ? { owner: event.owner } : {}) })),
          invoke: {
            id: OWNED_CHILD_ID,
            src: "service",
            input: ({ context }): ServiceInput => ({
              scope: context.scope,
              name: context.name,
              definition: context.definition,
              settings: context.settings,
              now: context.now,
              random: context.random,
              crash: context.crash
            }),
            onSnapshot: {
              // Most snapshots of a connected service (a health check started) change nothing shown.
              guard: ({ context, event }) => !shows(context, (event.snapshot as ServiceSnapshot).context),
              actions: raise(({ event }) => {
                const snapshot = event.snapshot as ServiceSnapshot
                return { type: "VIEW" as const, view: viewOf(snapshot.context, statusOf(snapshot)), local: true, connection: snapshot.context.connection }
              })
            },
            onError: {
              target: "owning",
              reenter: true,
              actions: [
                {
                  type: "reportCrash",
                  params: ({ context, event }) => {
                    const error = (event as { error?: unknown }).error
                    return { actorId: serviceSystemId(context.scope, context.name), attempt: (context.crash?.attempt ?? 0) + 1, message: crashMessage(error), error }
                  }
                },
                "childCrashed"
              ]
            }
          },
          on: {
            DISOWN: "mirroring",
            ...Object.fromEntries(SERVICE_EVENTS.map((type) => [type, { actions: toChild }]))
          }
        }
      }
    },
    status: {
      initial: "initializing",
      on: {
        VIEW: STATUSES.map((status) => ({
          guard: ({ context, event }: { context: ReplicatedContext; event: ReplicatedEvent }) =>
            event.type === "VIEW" && event.view.status === status && (event.local === true) === (context.role === "owner"),
          target: `.${status}`,
          actions: ["applyView" as const, "publish" as const]
        }))
      },
      states: Object.fromEntries(STATUSES.map((status) => [status, { tags: [status] }])) as Record<Status, { tags: [Status] }>
    }
  }
})

export type ReplicatedActorRef = ActorRefFrom<typeof replicatedServiceMachine>
