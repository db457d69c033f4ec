/**
 * How a service and its tools look to clients (docs/api.md), read from the service
 * actor's snapshot: the one source of truth for status. Secrets never appear: the URL, `args` and
 * texts are masked by the one masking of src/domain/secrets.ts.
 */
import { maskArgs, maskUrl, maskUrls } from "../domain/secrets.js"
import { clientId, resolveDefinition, scopeLabel, type ServiceDefinition, type Status, type TransportType } from "../domain/service-definition.js"
import { statusOf, type AuthInfo, type ServiceSnapshot, type Transition } from "../machines/service.js"
import type { ToolInfo } from "../mcp/types.js"
import { serviceToolFilter, type ToolGate } from "../domain/tool-filter.js"
import type { FieldChange, PinnedField, ToolChange } from "../domain/pin-rules.js"

/** A service in list form. */
export interface ServiceView {
  readonly name: string
  readonly url: string
  readonly status: Status
  readonly tool_count: number
  readonly transport_type: TransportType
  readonly command: string | null
  readonly args: ReadonlyArray<string> | null
  readonly scope: string
  readonly client_id: string
  readonly last_error: string | null
  /** What the user can do about the last connect failure, when known (beyond the contract's Service fields). */
  readonly hint: string | null
  readonly last_state_change: string
  readonly consecutive_failures: number
  readonly reconnect_attempts: number
  readonly next_retry_at: string | null
  readonly response_time_ms: number | null
  /** The MCP revision spoken with the upstream, negotiated or pinned; null before the first connect. */
  readonly protocol_version: string | null
  /** An OAuth-protected upstream's authorization state (never a token); absent when none is needed. */
  readonly auth?: AuthInfo
}

/**
 * A tool as clients see it: callable name `<service>__<tool>`, the contract's snake_case fields,
 * and every MCP field of the upstream's tools/list under its MCP name, unchanged.
 */
export interface ToolView {
  readonly name: string
  readonly original_name: string
  readonly description: string
  readonly service_name: string
  readonly title?: string
  readonly inputSchema: Record<string, unknown>
  readonly outputSchema?: Record<string, unknown>
  readonly annotations?: Record<string, unknown>
  readonly execution?: Record<string, unknown>
  readonly _meta?: Record<string, unknown>
}

/** A tool the store does not offer to agents, and why (get_service_info lists them). */
export interface HiddenToolView {
  readonly name: string
  readonly original_name: string
  readonly reason: string
}

/**
 * A tool held because its definition is not the pinned one (docs/tool-pins.md), as get_service_info
 * shows it: what changed, old and new text of each changed field (bounded).
 */
export interface HeldToolView {
  readonly name: string
  readonly original_name: string
  readonly change: "changed" | "new"
  readonly changed_fields: ReadonlyArray<PinnedField>
  readonly diff: Readonly<Partial<Record<PinnedField, FieldChange>>>
  readonly seen_at: string
}

/** Why a held tool is hidden (get_service_info's `hidden_tools`). */
export const heldReason = (change: ToolChange): string =>
  change.change === "new"
    ? "held: a new tool of a pinned service, not offered until an operator accepts it (accept_tool_changes)"
    : `held: its definition changed since it was pinned (${change.changed_fields.join(", ")}), not offered until an operator accepts it (accept_tool_changes)`

/** The held change of a tool of a service, or undefined when it is not held (a scan of the few held ones). */
export const heldChange = (context: { readonly heldTools: ReadonlyArray<ToolChange> }, tool: string): ToolChange | undefined => {
  const held = context.heldTools
  if (held.length === 0) return undefined
  for (const c of held) if (c.tool === tool) return c
  return undefined
}

/**
 * Why an upstream tool is not offered to agents, or undefined when it is: its `_meta.ui.visibility`
 * (MCP Apps) leaves out "model": it is for the app's own UI. (A tool that requires tasks is offered:
 * its calls run as tasks, src/mcp/session.ts.)
 */
export const hiddenReason = (tool: ToolInfo): string | undefined => {
  const ui = tool._meta?.["ui"]
  const visibility = typeof ui === "object" && ui !== null ? (ui as Record<string, unknown>)["visibility"] : undefined
  if (Array.isArray(visibility) && !visibility.includes("model")) return `its _meta.ui.visibility leaves out "model": the tool is for the app, not for agents`
  return undefined
}

/**
 * Why a tool of a service is not offered to agents, or undefined when it is: `hiddenReason`, or the
 * service's own allow-list (`include_tools` / `exclude_tools`, src/domain/tool-filter.ts).
 */
export const offerReason = (definition: ServiceDefinition, tool: ToolInfo): string | undefined =>
  hiddenReason(tool) ?? serviceToolFilter(definition)(tool.name)

/** How many tools a service offers agents (`offerReason` lets them through, not held): the count list_tools and tool_count give. */
export const offeredToolCount = (context: { readonly definition: ServiceDefinition; readonly tools: ReadonlyArray<ToolInfo>; readonly heldTools: ReadonlyArray<ToolChange> }): number =>
  context.tools.reduce((n, t) => (offerReason(context.definition, t) === undefined && heldChange(context, t.name) === undefined ? n + 1 : n), 0)

export const iso = (ms: number | undefined): string | null => (ms === undefined ? null : new Date(ms).toISOString())

/** Whether a status means connected: calls and checks can go through. */
export const isConnected = (s: Status): boolean => s === "healthy" || s === "warning"

/** Separator between service and tool in a callable name (service names cannot contain it). */
export const TOOL_SEPARATOR = "__"
export const callableName = (service: string, tool: string): string => `${service}${TOOL_SEPARATOR}${tool}`

const transportOf = (def: ServiceDefinition): TransportType => {
  try {
    return resolveDefinition(def).transport
  } catch {
    return def.command !== undefined ? "stdio" : "streamable_http"
  }
}

/**
 * Views by snapshot. A snapshot never changes (every change of the actor brings a new one), and a
 * view is read only from its snapshot, so a view is built once per snapshot however many requests
 * list it; a changed status or definition is a new snapshot, hence a new view.
 */
const serviceViews = new WeakMap<ServiceSnapshot, ServiceView>()
const toolViewLists = new WeakMap<ServiceSnapshot, ReadonlyArray<ToolView>>()
const hiddenToolLists = new WeakMap<ServiceSnapshot, ReadonlyArray<HiddenToolView>>()
const heldToolLists = new WeakMap<ServiceSnapshot, ReadonlyArray<HeldToolView>>()

/** A service in list form (shared; never mutate it). */
export const serviceView = (snapshot: ServiceSnapshot): ServiceView => {
  let view = serviceViews.get(snapshot)
  if (view === undefined) serviceViews.set(snapshot, (view = buildServiceView(snapshot)))
  return view
}

const buildServiceView = (snapshot: ServiceSnapshot): ServiceView => {
  const c = snapshot.context
  const def = c.definition
  return {
    name: c.name,
    url: typeof def.url === "string" ? maskUrl(def.url) : "",
    status: statusOf(snapshot),
    // The tools offered to agents (those list_tools lists); hidden ones are in get_service_info.
    tool_count: toolViews(snapshot).length,
    transport_type: transportOf(def),
    command: typeof def.command === "string" ? def.command : null,
    // A hand-edited file may hold anything here ("args": 5): shown as it can be, never a crash.
    args: def.command !== undefined ? (Array.isArray(def.args) ? maskArgs(def.args) : []) : null,
    scope: scopeLabel(c.scope),
    client_id: clientId(c.scope, c.name, def),
    // Scrubbed of the definition's secrets where they were made (src/runtime/adapter.ts); URLs once more here.
    last_error: c.lastError === undefined ? null : maskUrls(c.lastError),
    hint: c.hint === undefined ? null : maskUrls(c.hint),
    last_state_change: new Date(c.stateEnteredAt).toISOString(),
    consecutive_failures: c.consecutiveFailures,
    reconnect_attempts: c.reconnectAttempts,
    next_retry_at: iso(c.nextRetryAt),
    response_time_ms: c.responseTimeMs === undefined ? null : Math.round(c.responseTimeMs * 100) / 100,
    protocol_version: c.era?.version ?? null,
    ...(c.auth !== undefined ? { auth: c.auth } : {})
  }
}

/** The tools of a service offered to agents, callable names (shared; never mutate them). */
export const toolViews = (snapshot: ServiceSnapshot): ReadonlyArray<ToolView> => {
  let views = toolViewLists.get(snapshot)
  if (views === undefined) toolViewLists.set(snapshot, (views = buildToolViews(snapshot)))
  return views
}

// The upstream's own objects, not copies: they are never mutated (see ToolInfo).
const buildToolViews = (snapshot: ServiceSnapshot): ReadonlyArray<ToolView> =>
  snapshot.context.tools
    .filter((t) => offerReason(snapshot.context.definition, t) === undefined && heldChange(snapshot.context, t.name) === undefined)
    .map((t) => ({
      name: callableName(snapshot.context.name, t.name),
      original_name: t.name,
      description: t.description,
      service_name: snapshot.context.name,
      ...(t.title !== undefined ? { title: t.title } : {}),
      inputSchema: t.inputSchema,
      ...(t.outputSchema !== undefined ? { outputSchema: t.outputSchema } : {}),
      ...(t.annotations !== undefined ? { annotations: t.annotations } : {}),
      ...(t.execution !== undefined ? { execution: t.execution } : {}),
      ...(t._meta !== undefined ? { _meta: t._meta } : {})
    }))

const gatedViews = new WeakMap<ToolGate, WeakMap<ServiceSnapshot, ReadonlyArray<ToolView>>>()

/**
 * The tools of a service a key's gate lets through (all of `toolViews` without one): built once per
 * gate and snapshot, as `toolViews` is.
 */
export const toolViewsFor = (snapshot: ServiceSnapshot, gate: ToolGate | undefined): ReadonlyArray<ToolView> => {
  if (gate === undefined) return toolViews(snapshot)
  let bySnapshot = gatedViews.get(gate)
  if (bySnapshot === undefined) gatedViews.set(gate, (bySnapshot = new WeakMap()))
  let views = bySnapshot.get(snapshot)
  if (views === undefined) bySnapshot.set(snapshot, (views = toolViews(snapshot).filter((t) => gate.allows(t.name))))
  return views
}

/** The tools of a service not offered to agents, with the reason (shared; never mutate them). */
export const hiddenToolViews = (snapshot: ServiceSnapshot): ReadonlyArray<HiddenToolView> => {
  let views = hiddenToolLists.get(snapshot)
  if (views === undefined) {
    views = snapshot.context.tools.flatMap((t) => {
      const held = heldChange(snapshot.context, t.name)
      const reason = offerReason(snapshot.context.definition, t) ?? (held === undefined ? undefined : heldReason(held))
      return reason === undefined ? [] : [{ name: callableName(snapshot.context.name, t.name), original_name: t.name, reason }]
    })
    hiddenToolLists.set(snapshot, views)
  }
  return views
}

/** The tools of a service held by their pins, with what changed (shared; never mutate them). */
export const heldToolViews = (snapshot: ServiceSnapshot): ReadonlyArray<HeldToolView> => {
  let views = heldToolLists.get(snapshot)
  if (views === undefined) {
    const name = snapshot.context.name
    views = snapshot.context.heldTools.map((c) => ({
      name: callableName(name, c.tool),
      original_name: c.tool,
      change: c.change,
      changed_fields: c.changed_fields,
      diff: c.diff,
      seen_at: c.seen_at
    }))
    heldToolLists.set(snapshot, views)
  }
  return views
}

/** A recorded transition with its time as ISO text. */
export const transitionView = (t: Transition) => ({ from: t.from, to: t.to, at: new Date(t.at).toISOString(), reason: t.reason })
