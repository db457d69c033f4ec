/**
 * The approvals group's contract (README, "Approvals"; beyond the 56): the calls waiting for a
 * person's approval, listed for the store or one agent, and decided by a key allowed to approve
 * (an admin key: src/http/access.ts keeps every other role off the store-wide routes and off POST).
 */
import * as HttpApiEndpoint from "@effect/platform/HttpApiEndpoint"
import * as HttpApiGroup from "@effect/platform/HttpApiGroup"
import * as OpenApi from "@effect/platform/OpenApi"
import { Schema } from "effect"
import { AgentId } from "../../domain/schemas.js"
import { BeyondContract, closed, ok } from "../payloads.js"

/** An approval's id, as a call's progress, `/events` and the list give it. */
export const ApprovalId = Schema.String.pipe(
  Schema.pattern(/^apr_[A-Za-z0-9_-]{22}$/, { message: () => "must be an approval_id as the list or the call's progress gave it (apr_ followed by 22 characters)" })
).annotations({ description: "A pending approval's id", examples: ["apr_Qm9vbGVhbnMgYXJlIGZ1bg"] })

/** A call waiting for its approval (src/runtime/approvals.ts `ApprovalView`). */
export const Approval = Schema.Struct({
  approval_id: Schema.String,
  scope: Schema.String.annotations({ description: "`store`, or the agent's id" }),
  agent_id: Schema.NullOr(Schema.String),
  service_name: Schema.String,
  tool_name: Schema.String.annotations({ description: "The callable name <service>__<tool>" }),
  original_name: Schema.String,
  arguments: Schema.Unknown.annotations({ description: "The call's arguments (cut to the records' limit; then arguments_truncated)" }),
  arguments_truncated: Schema.optional(Schema.Boolean),
  arguments_digest: Schema.String.annotations({ description: "SHA-256 (hex) of the arguments' canonical JSON: what the approval is bound to" }),
  caller: Schema.String.annotations({ description: "Who made the call: the key's role, agent and label" }),
  trace_id: Schema.String,
  call_id: Schema.NullOr(Schema.String).annotations({ description: "The asynchronous call's id, when the call is one" }),
  requested_at: Schema.String,
  expires_at: Schema.String,
  approval_url: Schema.NullOr(Schema.String).annotations({ description: "The dashboard's page of this approval" })
}).annotations({ identifier: "Approval" })

export const ApprovalsResponse = Schema.Struct({ ...ok, approvals: Schema.Array(Approval), total: Schema.Number })
export const ApprovalResponse = Schema.Struct({ ...ok, approval: Approval })

export const DecisionPayload = closed({
  decision: Schema.Literal("approve", "deny").annotations({ message: () => ({ message: 'must be "approve" or "deny"', override: true }) }),
  arguments_digest: Schema.optional(
    Schema.String.pipe(Schema.pattern(/^[0-9a-f]{64}$/, { message: () => "must be the approval's arguments_digest (64 hex characters)" }))
  ).annotations({ description: "When given, the decision holds only if the call's arguments are those the approver saw" })
})

export const DecisionResponse = Schema.Struct({
  ...ok,
  approval: Approval,
  decision: Schema.Literal("approved", "denied"),
  decided_by: Schema.String
})

const ApprovalPath = Schema.Struct({ approval_id: ApprovalId })

export class ApprovalsApi extends HttpApiGroup.make("approvals")
  .add(
    HttpApiEndpoint.get("listApprovals", "/for_store/approvals")
      .addSuccess(ApprovalsResponse)
      .annotate(BeyondContract, true)
      .annotate(OpenApi.Summary, "Calls waiting for an approval, in the store and every agent")
  )
  .add(
    HttpApiEndpoint.get("getApproval", "/for_store/approvals/:approval_id")
      .setPath(ApprovalPath)
      .addSuccess(ApprovalResponse)
      .annotate(BeyondContract, true)
      .annotate(OpenApi.Summary, "One call waiting for an approval")
  )
  .add(
    HttpApiEndpoint.post("decideApproval", "/for_store/approvals/:approval_id")
      .setPath(ApprovalPath)
      .setPayload(DecisionPayload)
      .addSuccess(DecisionResponse)
      .annotate(BeyondContract, true)
      .annotate(OpenApi.Summary, "Approve or deny a waiting call (an admin key)")
  )
  .add(
    HttpApiEndpoint.get("listAgentApprovals", "/for_agent/:agent_id/approvals")
      .setPath(Schema.Struct({ agent_id: AgentId }))
      .addSuccess(ApprovalsResponse)
      .annotate(BeyondContract, true)
      .annotate(OpenApi.Summary, "An agent's calls waiting for an approval")
  ) {}
