/**
 * Actor inspection for state-machine visualizers and test harnesses: the machine definitions as
 * JSON (XState's own `toJSON()` form, which its visualizer tools read), every live actor with its
 * parent and state, and inspection events reduced to JSON-safe summaries.
 */
import type { AnyActorRef, InspectionEvent } from "xstate"
import { agentMachine } from "../machines/agent.js"
import { serviceMachine, statusOf, type ServiceSnapshot } from "../machines/service.js"
import { storeMachine } from "../machines/root.js"
import { STORE_SYSTEM_ID } from "../machines/supervisor.js"
import type { Store } from "./store.js"

/** The service, agent and store machine definitions. */
export const machineDefinitions = () => ({
  service: serviceMachine.toJSON(),
  agent: agentMachine.toJSON(),
  store: storeMachine.toJSON()
})

interface ActorSummary {
  readonly system_id: string
  readonly parent: string | null
  readonly machine: string
  readonly status: string
  readonly value: unknown
  readonly context: Record<string, unknown>
}

const summarizeContext = (actor: AnyActorRef): Record<string, unknown> => {
  const snapshot = actor.getSnapshot() as { context?: Record<string, unknown> }
  const c = snapshot.context ?? {}
  if (actor.id.startsWith("service:")) {
    const s = actor.getSnapshot() as ServiceSnapshot
    return {
      name: s.context.name,
      status: statusOf(s),
      tool_count: s.context.tools.length,
      consecutive_failures: s.context.consecutiveFailures,
      reconnect_attempts: s.context.reconnectAttempts,
      last_error: s.context.lastError ?? null,
      connected: s.context.connection !== undefined
    }
  }
  const services = (c["services"] ?? {}) as Record<string, unknown>
  const agents = (c["agents"] ?? {}) as Record<string, unknown>
  return { services: Object.keys(services).length, ...(c["agents"] !== undefined ? { agents: Object.keys(agents).length } : {}) }
}

/** Every live actor of the store's system, root first. */
export const liveActors = (store: Store): ReadonlyArray<ActorSummary> => {
  const out: ActorSummary[] = []
  const visit = (actor: AnyActorRef, parent: string | null) => {
    const snapshot = actor.getSnapshot() as { status: string; value?: unknown; children?: Record<string, AnyActorRef> }
    out.push({
      system_id: actor === store.actor ? STORE_SYSTEM_ID : actor.id,
      parent,
      machine: ((actor as unknown as { logic?: { id?: string } }).logic?.id) ?? "unknown",
      status: snapshot.status,
      value: snapshot.value ?? null,
      context: summarizeContext(actor)
    })
    for (const child of Object.values(snapshot.children ?? {})) {
      // Invoked helpers (connection holders, connection attempts) are not machines; visualizers want the tree of machines.
      if (child.id.startsWith("service:") || child.id.startsWith("agent:")) visit(child, actor === store.actor ? STORE_SYSTEM_ID : actor.id)
    }
  }
  visit(store.actor, null)
  return out
}

/** A JSON-safe summary of one inspection event (no contexts: they hold live connections). */
export const inspectionSummary = (event: InspectionEvent): Record<string, unknown> => {
  const actorId = (event.actorRef as { id?: string }).id ?? null
  switch (event.type) {
    case "@xstate.event":
      return {
        type: event.type,
        actor: actorId,
        source: (event.sourceRef as { id?: string } | undefined)?.id ?? null,
        event: safeEvent(event.event)
      }
    case "@xstate.snapshot": {
      const s = event.snapshot as { status?: string; value?: unknown }
      return { type: event.type, actor: actorId, status: s.status ?? null, value: s.value ?? null, event: safeEvent(event.event) }
    }
    case "@xstate.microstep":
      return { type: event.type, actor: actorId, value: (event.snapshot as { value?: unknown }).value ?? null }
    case "@xstate.action":
      return { type: event.type, actor: actorId, action: event.action.type }
    default:
      return { type: event.type, actor: actorId }
  }
}

const safeEvent = (e: { type: string }): Record<string, unknown> => {
  const out: Record<string, unknown> = { type: e.type }
  for (const [k, v] of Object.entries(e)) {
    if (k === "type" || k === "output" || k === "actorRef" || k === "snapshot") continue
    if (v === null || ["string", "number", "boolean"].includes(typeof v)) out[k] = v
    else if ((v as unknown) instanceof Error) out[k] = (v as unknown as Error).message
  }
  return out
}
