/**
 * The mirror of a service owned by another replica (docs/replicas.md, "Next steps"): the same
 * context shape and the same status tags as the service machine, so that `statusOf`, the views,
 * the waits (src/runtime/bridge.ts) and the lists read it as they read a live service, but no
 * connection, no timers and no side effect: one event, `VIEW`, carries the owner's published view
 * (`viewOf`) and puts the mirror in the owner's status with the owner's figures. Every other
 * service event is ignored (the owner acts; a mirror only shows).
 *
 * Not wired into the store yet: the store spawns service actors only.
 */
import { assign, setup } from "xstate"
import { STATUSES, type Status } from "../domain/service.js"
import { initialServiceContext, type ServiceContext, type ServiceEvent, type ServiceInput } from "./service.js"

/** What an owner publishes of a service actor: its context without the connection and the local-only parts (JSON-safe). */
export type PublishedView = Omit<ServiceContext, "scope" | "name" | "settings" | "now" | "random" | "connection"> & { readonly status: Status }

/** The published view of a service actor's context in `status`. */
export const viewOf = (context: ServiceContext, status: Status): PublishedView => {
  const { scope: _s, name: _n, settings: _t, now: _w, random: _r, connection: _c, ...rest } = context
  return { ...rest, status }
}

export type MirrorEvent = { readonly type: "VIEW"; readonly view: PublishedView } | ServiceEvent

export const mirrorMachine = setup({
  types: {
    context: {} as ServiceContext,
    events: {} as MirrorEvent,
    input: {} as ServiceInput
  },
  actions: {
    applyView: assign(({ event }) => (event.type === "VIEW" ? { ...event.view, connection: undefined } : {}))
  }
}).createMachine({
  id: "mirror",
  context: ({ input }) => initialServiceContext(input),
  initial: "initializing",
  on: {
    VIEW: STATUSES.map((status) => ({
      guard: ({ event }: { event: MirrorEvent }) => event.type === "VIEW" && event.view.status === status,
      target: `.${status}`,
      actions: "applyView" as const
    }))
  },
  states: Object.fromEntries(STATUSES.map((status) => [status, { tags: [status] }])) as Record<Status, { tags: [Status] }>
})
