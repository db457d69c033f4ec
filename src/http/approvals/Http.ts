/**
 * The approvals group's handlers: the store's pending approvals (src/runtime/approvals.ts) listed
 * and decided; in replica mode the whole cluster's, a decision carried to the replica whose call
 * waits (src/cluster/shared-approvals.ts). Only an admin key gets here to decide (src/http/access.ts);
 * the decision names the key's label, and every refused decision is a log line.
 */
import * as HttpApiBuilder from "@effect/platform/HttpApiBuilder"
import type * as HttpApiGroup from "@effect/platform/HttpApiGroup"
import { Effect, type Layer, type Schema } from "effect"
import { log } from "../../logging/log.js"
import type { ApprovalView, Decision } from "../../runtime/approvals.js"
import { callerWords, currentPrincipal, gateOf } from "../access.js"
import { Api } from "../Api.js"
import { ApprovalsService } from "../../runtime/store-parts.js"
import { ClusterUnavailable } from "../../domain/errors.js"
import { errorBody, fromStoreError, NotFound, Unavailable, validationError, type BadRequest } from "../contract-errors.js"
import type { DecisionResponse } from "./Api.js"

const notPending = (id: string) =>
  new NotFound(errorBody("NOT_FOUND", `No call waits for approval '${id}': it is unknown, already decided, timed out, or its caller went away`, { approval_id: id }))

/** The replica whose call waits for the approval is gone (replica mode): its call went with it. */
const holderGone = (id: string, why: string) =>
  new NotFound(errorBody("NOT_FOUND", `No call waits for approval '${id}' any more: ${why}, and its call went with it; nothing was decided`, { approval_id: id }))

/** The replica whose call waits did not answer (replica mode): the decision may have been applied there. */
const outcomeUnknown = (id: string, why: string) =>
  new Unavailable(
    errorBody("SERVICE_UNAVAILABLE", `No answer about approval '${id}': ${why}; the decision may have been applied there: read the approval again before deciding again`, {
      approval_id: id,
      reason: "cluster_unavailable",
      retry_after_seconds: 1
    })
  )

const listAnswer = (approvals: ReadonlyArray<ApprovalView>, where: string) => ({
  success: true,
  message: `${approvals.length} call(s) waiting for an approval in ${where}`,
  approvals,
  total: approvals.length
})

// The group's type, written out: the declaration emit (npm run build) would otherwise infer it from
// every handler, and the type-check holds the handlers to it.
export const ApprovalsHttpLive: Layer.Layer<HttpApiGroup.ApiGroup<"mcp-store", "approvals">, never, ApprovalsService> = HttpApiBuilder.group(Api, "approvals", (handlers) =>
  Effect.gen(function* () {
    const approvals = yield* ApprovalsService
    return handlers
      .handle("listApprovals", () => Effect.map(Effect.promise(() => approvals.listAll()), (all) => listAnswer(all, "the store and every agent")))
      .handle("listAgentApprovals", ({ path }) =>
        Effect.flatMap(currentPrincipal, (principal) =>
          Effect.map(Effect.promise(() => approvals.listAll(path.agent_id)), (all) => {
            // An agent key's `tools` list: only the calls of tools it may see.
            const gate = gateOf(principal)
            return listAnswer(all.filter((a) => gate === undefined || gate.allows(a.tool_name)), `agent '${path.agent_id}'`)
          })
        )
      )
      .handle("getApproval", ({ path }) =>
        Effect.flatMap(
          Effect.tryPromise({
            try: () => approvals.find(path.approval_id),
            // Replica mode, Redis away: whether another replica's call waits for it is not known.
            catch: (e) => {
              log.warn(`approval ${path.approval_id} cannot be looked up in the cluster (${(e as Error).message})`, { event: "cluster_approvals_failed", approval_id: path.approval_id })
              return fromStoreError(ClusterUnavailable.of(`looking up approval ${path.approval_id}`, e)) as Unavailable
            }
          }),
          (view) => (view === undefined ? Effect.fail(notPending(path.approval_id)) : Effect.succeed({ success: true, message: `The call of '${view.tool_name}' waits for an approval`, approval: view }))
        )
      )
      .handle("decideApproval", ({ path, payload }) =>
        Effect.flatMap(currentPrincipal, (principal): Effect.Effect<Schema.Schema.Type<typeof DecisionResponse>, NotFound | BadRequest | Unavailable> => {
          // Who decides, as records and logs name it: the key's role and label (never the key).
          const by = callerWords(principal)
          return Effect.flatMap(
            Effect.tryPromise({
              try: () => approvals.decideAnywhere(path.approval_id, payload.decision, by, payload.arguments_digest),
              // Replica mode, Redis away: the approval's holder cannot be found; nothing was decided.
              catch: (e) => {
                log.warn(`refused a decision (${payload.decision}) of approval ${path.approval_id} by ${by}: the cluster's Redis cannot be reached`, { event: "approval_decision_refused", approval_id: path.approval_id })
                return fromStoreError(ClusterUnavailable.of(`deciding approval ${path.approval_id}`, e)) as Unavailable
              }
            }),
            (decided) => answerDecision(path.approval_id, payload.decision, by, decided)
          )
        })
      )
  })
)

/** A decision's answer: the decided approval, or why nothing was decided (each refusal a log line). */
const answerDecision = (
  id: string,
  asked: "approve" | "deny",
  by: string,
  decided: Decision
): Effect.Effect<Schema.Schema.Type<typeof DecisionResponse>, NotFound | BadRequest | Unavailable> => {
  if (decided !== undefined && decided !== "mismatch" && "unknown" in decided) {
    log.warn(`a decision (${asked}) of approval ${id} by ${by} may or may not have been applied: ${decided.unknown}`, { event: "approval_decision_unknown", approval_id: id })
    return Effect.fail(outcomeUnknown(id, decided.unknown))
  }
  if (decided === undefined || decided === "mismatch" || "gone" in decided) {
    const why = decided === undefined ? "no call waits for it" : decided === "mismatch" ? "the arguments digest given is not the call's" : decided.gone
    log.warn(`refused a decision (${asked}) of approval ${id} by ${by}: ${why}`, { event: "approval_decision_refused", approval_id: id })
    if (decided === undefined) return Effect.fail(notPending(id))
    if (decided !== "mismatch") return Effect.fail(holderGone(id, decided.gone))
    return Effect.fail(validationError("Invalid request: arguments_digest", [{ field: "arguments_digest", problem: "is not the digest of the waiting call's arguments: nothing was decided; read the approval again" }]))
  }
  const decision = asked === "approve" ? ("approved" as const) : ("denied" as const)
  return Effect.succeed({ success: true, message: `The call of '${decided.tool_name}' was ${decision} by ${by}`, approval: decided, decision, decided_by: by })
}
