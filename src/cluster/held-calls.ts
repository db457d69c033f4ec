/**
 * Held calls across replicas (docs/replicas.md, "Held calls"): a call held for its caller's input
 * (src/runtime/input-required.ts) stays on the replica the caller called first, where its record,
 * allow-lists and time-out are; its state names that replica, sealed. A retry that a load balancer
 * sends elsewhere is carried to the holder over the signed forwarding route (`held`,
 * src/cluster/forward.ts) and answered there by `HeldCalls.resume`, with the caller's scope, key
 * digest and tool checked as on a retry made there; the step comes back as JSON (`WireStep`) and is
 * answered by the face the retry reached, as a step of its own would be.
 *
 * Bounded: the holder sends a sign of life every `HELD_ALIVE_MS` while the step is not there yet
 * (the call's own time-out ends it), so a retry waits at most `HELD_SILENCE_MS` for a holder that
 * went silent; a holder that left the cluster or refuses the connection is known at once, one
 * whose host answers no connection after the forwarder's connect bound. Either way the caller is told the call is lost (a ValidationError on `request_state`), and the call, if
 * its holder still runs it, ends at its time-out as an unanswered one does.
 */
import { Cause, Exit, Option } from "effect"
import {
  AmbiguousTool,
  InvalidArguments,
  ServiceNotFound,
  ServiceUnavailable,
  ToolChanged,
  ToolNotAllowed,
  ToolNotFound,
  ToolTimeout,
  TooMany,
  UpstreamError,
  ValidationError,
  ApprovalRefused,
  ClusterUnavailable,
  CredentialsRequired,
  type FieldProblem
} from "../domain/errors.js"
import { McpRequestError } from "../mcp/types.js"
import type { CallExit, CallOutcome, CallToolError } from "../runtime/calls.js"
import type { HeldCallsReplica, HeldStep, InputRequest } from "../runtime/input-required.js"
import type { Cluster } from "./cluster.js"
import { HELD_SILENCE_MS, NotDelivered } from "./forward.js"

/** A call's failure as it travels: the tagged error's fields. */
type WireFailure = { readonly _tag: string; readonly message: string } & Record<string, unknown>

/** A held call's step (or the retry's refusal) as it travels from the holder. */
export type WireStep =
  | { readonly input: { readonly state: string; readonly requests: Readonly<Record<string, InputRequest>> } }
  | { readonly ended: { readonly ok: CallOutcome } | { readonly failed: WireFailure } | { readonly defect: string } }
  | { readonly refused: { readonly problems: ReadonlyArray<FieldProblem> } }

/** The failures a call may end with, by tag: rebuilt as themselves where the retry landed. */
const CALL_ERRORS: Readonly<Record<CallToolError["_tag"], new (fields: never) => CallToolError>> = {
  ServiceNotFound,
  ToolNotFound,
  ToolNotAllowed,
  ToolChanged,
  AmbiguousTool,
  InvalidArguments,
  UpstreamError,
  ServiceUnavailable,
  ToolTimeout,
  TooMany,
  ApprovalRefused,
  CredentialsRequired,
  ClusterUnavailable
}

/** How a call ended, as it travels. */
const exitToWire = (exit: CallExit): Extract<WireStep, { ended: unknown }>["ended"] => {
  if (Exit.isSuccess(exit)) return { ok: exit.value }
  const failure = Cause.failureOption(exit.cause)
  if (Option.isSome(failure)) return { failed: { ...failure.value, _tag: failure.value._tag, message: failure.value.message } }
  const defect = Cause.squash(exit.cause)
  return { defect: defect instanceof Error ? defect.message : String(defect) }
}

/** How a call ended, from the wire: its outcome, its tagged failure, or a defect (any failure not known here). */
const exitFromWire = (wire: Extract<WireStep, { ended: unknown }>["ended"]): CallExit => {
  if ("ok" in wire) return Exit.succeed(wire.ok)
  if ("failed" in wire) {
    const { _tag, ...fields } = wire.failed
    const known = Object.hasOwn(CALL_ERRORS, _tag) ? CALL_ERRORS[_tag as CallToolError["_tag"]] : undefined
    if (known !== undefined) return Exit.fail(new known(fields as never))
    return Exit.die(new Error(String(wire.failed.message)))
  }
  return Exit.die(new Error(String(wire.defect)))
}

/** A held call's step (or the retry's refusal) as the holder sends it. */
export const stepToWire = (step: HeldStep<CallExit> | ValidationError): WireStep => {
  if (step instanceof ValidationError) return { refused: { problems: step.problems } }
  return step._tag === "Ended" ? { ended: exitToWire(step.exit) } : { input: { state: step.state, requests: step.requests } }
}

/** A step from the holder, as a retry made here would have it. */
const stepFromWire = (wire: WireStep): HeldStep<CallExit> | ValidationError => {
  if ("refused" in wire) return ValidationError.of(wire.refused.problems)
  if ("ended" in wire) return { _tag: "Ended", exit: exitFromWire(wire.ended) }
  return { _tag: "InputRequired", state: String(wire.input.state), requests: wire.input.requests }
}

/** What a retry is told when the holder of its call cannot answer it: the call is lost. */
const holderLost = (why: string): ValidationError =>
  ValidationError.of([
    { field: "request_state", problem: `names a call held by another replica, which ${why}; the call is lost: call the tool again without it` }
  ])

/** Held calls on a cluster: states sealed with its secret, retries carried to their holders. */
export const heldCallsOf = (cluster: Cluster): HeldCallsReplica => ({
  replicaId: cluster.replicaId,
  secret: cluster.secret,
  carry: async (holder, retry, owner, { onProgress, signal }) => {
    let wire: unknown
    try {
      // No time-out of its own: the holder's signs of life keep it open while the call runs (and its own time-out ends it).
      wire = await cluster.sendToReplica(holder, { op: "held", field: "", retry, owner, timeoutMs: HELD_SILENCE_MS }, { signal, onProgress })
    } catch (e) {
      if (e instanceof NotDelivered) return holderLost("has left the cluster or does not answer connections")
      if (e instanceof McpRequestError && e.kind === "timeout") return holderLost(`did not answer for ${HELD_SILENCE_MS / 1000} s`)
      return holderLost(`cannot be reached (${(e as Error).message})`)
    }
    if (typeof wire !== "object" || wire === null) return holderLost("gave an answer that is not a step of the call")
    return stepFromWire(wire as WireStep)
  }
})
