/**
 * accept_tool_changes (docs/tool-pins.md): an operator accepts the held definitions of a service's
 * tools. The held definitions, as the service's snapshot shows them, are pinned (on disk, or in
 * the cluster's Redis), then the service lists its tools again so that its actor takes the accepted
 * pins (in replica mode the refresh goes to the replica that runs it). One operation for the REST
 * routes, the dashboard (through REST) and the CLI.
 */
import { Effect } from "effect"
import { ClusterUnavailable, ValidationError, type ServiceNotFound } from "../domain/errors.js"
import { statusOf } from "../machines/service.js"
import { awaitSnapshot } from "./bridge.js"
import type { ScopeContext } from "./host.js"
import { callableName, isConnected } from "./service-views.js"

/** The most tool names one accept may list. */
export const MAX_ACCEPT_TOOLS = 1000

export interface AcceptOutcome {
  readonly service_name: string
  /** The tools whose held definitions were pinned (original names). */
  readonly accepted: ReadonlyArray<string>
  /** The tools still held once the service listed its tools again (changed again meanwhile, or not asked for). */
  readonly still_held: ReadonlyArray<string>
}

/**
 * Accepts the held tools of a service (all of them, or those `tools` names: original or callable
 * names). A name that is not held (or that the caller's key may not see) is a 400 naming the held
 * ones, and nothing is accepted. `by` says who accepted, for the log line.
 */
export const acceptToolChanges = (
  ctx: ScopeContext,
  serviceName: string,
  tools: ReadonlyArray<string> | undefined,
  by: string
): Effect.Effect<AcceptOutcome, ServiceNotFound | ValidationError | ClusterUnavailable> =>
  Effect.gen(function* () {
    const actor = yield* ctx.service(serviceName)
    const before = actor.getSnapshot().context
    const name = before.name
    // What this caller sees held: a key's tools list narrows it, as it narrows the lists.
    const held = before.heldTools.filter((c) => ctx.gate === undefined || ctx.gate.allows(callableName(name, c.tool)))
    const named = (c: { readonly tool: string }, given: string) => given === c.tool || given === callableName(name, c.tool)
    if (tools !== undefined) {
      const problems = tools.flatMap((t, i) =>
        held.some((c) => named(c, t))
          ? []
          : [{ field: `tools[${i}]`, problem: `'${t.slice(0, 200)}' is not held in '${name}' (held: ${held.length === 0 ? "none" : held.map((c) => c.tool).join(", ")})` }]
      )
      if (problems.length > 0) return yield* Effect.fail(ValidationError.of(problems))
    }
    const chosen = tools === undefined ? held : held.filter((c) => tools.some((t) => named(c, t)))
    const pins = ctx.host.pins
    if (chosen.length === 0 || pins === undefined) return { service_name: name, accepted: [], still_held: before.heldTools.map((c) => c.tool) }
    const accepted = yield* Effect.tryPromise({ try: () => pins.accept(ctx.scope, name, before.tools, chosen, by), catch: (e) => e }).pipe(
      Effect.catchAll((e) => (ctx.host.replication.shared ? Effect.fail(ClusterUnavailable.of("accepting tool changes", e)) : Effect.die(e)))
    )
    // The service lists its tools again: its actor takes the accepted pins (not connected: at its next connect).
    if (accepted.length > 0 && isConnected(statusOf(actor.getSnapshot()))) {
      actor.send({ type: "REFRESH_TOOLS" })
      const timeoutMs = ctx.host.settings.ping_timeout_seconds * 1000 + 1000
      yield* awaitSnapshot(actor, (s) => s.context.toolsVersion > before.toolsVersion || !isConnected(statusOf(s)), { timeoutMs }).pipe(Effect.ignore)
    }
    return { service_name: name, accepted, still_held: actor.getSnapshot().context.heldTools.map((c) => c.tool) }
  })
