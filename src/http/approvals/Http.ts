/**
 * The approvals group's handlers: the store's pending approvals (src/runtime/approvals.ts) listed
 * and decided. Only an admin key gets here to decide (src/http/access.ts); the decision names the
 * key's label, and every refused decision is a log line.
 */
import * as HttpApiBuilder from "@effect/platform/HttpApiBuilder"
import { Effect, type Schema } from "effect"
import { log } from "../../logging/log.js"
import type { ApprovalView } from "../../runtime/approvals.js"
import { callerWords, currentPrincipal, gateOf } from "../access.js"
import { Api } from "../Api.js"
import { App } from "../context.js"
import { errorBody, NotFound, validationError, type BadRequest } from "../contract-errors.js"
import type { DecisionResponse } from "./Api.js"

const notPending = (id: string) =>
  new NotFound(errorBody("NOT_FOUND", `No call waits for approval '${id}': it is unknown, already decided, timed out, or its caller went away`, { approval_id: id }))

const listAnswer = (approvals: ReadonlyArray<ApprovalView>, where: string) => ({
  success: true,
  message: `${approvals.length} call(s) waiting for an approval in ${where}`,
  approvals,
  total: approvals.length
})

export const ApprovalsHttpLive = HttpApiBuilder.group(Api, "approvals", (handlers) =>
  Effect.gen(function* () {
    const { store } = yield* App
    const approvals = store.approvals
    return handlers
      .handle("listApprovals", () => Effect.sync(() => listAnswer(approvals.list(), "the store and every agent")))
      .handle("listAgentApprovals", ({ path }) =>
        Effect.map(currentPrincipal, (principal) => {
          // An agent key's `tools` list: only the calls of tools it may see.
          const gate = gateOf(principal)
          const listed = approvals.list(path.agent_id).filter((a) => gate === undefined || gate.allows(a.tool_name))
          return listAnswer(listed, `agent '${path.agent_id}'`)
        })
      )
      .handle("getApproval", ({ path }) => {
        const view = approvals.get(path.approval_id)
        return view === undefined ? Effect.fail(notPending(path.approval_id)) : Effect.succeed({ success: true, message: `The call of '${view.tool_name}' waits for an approval`, approval: view })
      })
      .handle("decideApproval", ({ path, payload }) =>
        Effect.flatMap(currentPrincipal, (principal): Effect.Effect<Schema.Schema.Type<typeof DecisionResponse>, NotFound | BadRequest> => {
          // Who decides, as records and logs name it: the key's role and label (never the key).
          const by = callerWords(principal)
          const decided = approvals.decide(path.approval_id, payload.decision, by, payload.arguments_digest)
          if (decided === undefined || decided === "mismatch") {
            const why = decided === undefined ? "no call waits for it" : "the arguments digest given is not the call's"
            log.warn(`refused a decision (${payload.decision}) of approval ${path.approval_id} by ${by}: ${why}`, { event: "approval_decision_refused", approval_id: path.approval_id })
            return decided === undefined
              ? Effect.fail(notPending(path.approval_id))
              : Effect.fail(validationError("Invalid request: arguments_digest", [{ field: "arguments_digest", problem: "is not the digest of the waiting call's arguments: nothing was decided; read the approval again" }]))
          }
          const decision = payload.decision === "approve" ? ("approved" as const) : ("denied" as const)
          return Effect.succeed({ success: true, message: `The call of '${decided.tool_name}' was ${decision} by ${by}`, approval: decided, decision, decided_by: by })
        })
      )
  })
)
