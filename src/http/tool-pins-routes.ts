/**
 * accept_tool_changes, beyond the contract (docs/tool-pins.md): its declaration for both scopes
 * (`/for_store/...`: the admin key; `/for_agent/{agent_id}/...`: that agent's key too, for its own
 * services, narrowed by its tools list) and its one handler. Kept apart from the shared payloads so
 * the pins' routes are read in one place.
 */
import * as HttpApiEndpoint from "@effect/platform/HttpApiEndpoint"
import { Effect, Schema } from "effect"
import { ServiceRef } from "../domain/schemas.js"
import { acceptToolChanges, MAX_ACCEPT_TOOLS } from "../runtime/accept-tool-changes.js"
import { currentPrincipal } from "./access.js"
import { contract } from "./contract-errors.js"
import { BeyondContract, closed, ok } from "./payloads.js"
import type { ScopeRef } from "./scope-handlers.js"

/** `service_name`, and optionally the tools to accept (original or callable names; all held ones when absent). */
export const AcceptToolChangesPayload = closed({
  service_name: ServiceRef,
  tools: Schema.optional(
    Schema.Array(Schema.String.pipe(Schema.minLength(1), Schema.maxLength(300)))
      .pipe(Schema.minItems(1), Schema.maxItems(MAX_ACCEPT_TOOLS))
      .annotations({ description: `The held tools to accept (1 to ${MAX_ACCEPT_TOOLS} original or callable names); every held tool of the service when absent` })
  )
})

export const AcceptToolChangesResponse = Schema.Struct({
  ...ok,
  service_name: Schema.String,
  accepted: Schema.Array(Schema.String).annotations({ description: "The tools whose held definitions are now pinned (original names)" }),
  still_held: Schema.Array(Schema.String).annotations({ description: "The service's tools still held after it listed its tools again" })
})

/** The endpoint under a scope's prefix (`/for_store` or `/for_agent/:agent_id`). */
export const acceptToolChangesEndpoint = (prefix: string) =>
  HttpApiEndpoint.post("acceptToolChanges", `${prefix}/accept_tool_changes` as `/${string}`)
    .setPayload(AcceptToolChangesPayload)
    .addSuccess(AcceptToolChangesResponse)
    .annotate(BeyondContract, true)

/** The handler of both scopes: who accepted is the request's key role (never the key). */
export const acceptToolChangesAnswer = (scope: ScopeRef, payload: Schema.Schema.Type<typeof AcceptToolChangesPayload>) =>
  contract(
    Effect.gen(function* () {
      const ctx = yield* scope
      const principal = yield* currentPrincipal
      const by = principal.role === "agent" ? `agent key of '${principal.agentId}'` : `${principal.role} key`
      const outcome = yield* acceptToolChanges(ctx, payload.service_name, payload.tools, by)
      const accepted = outcome.accepted.length
      return {
        success: true,
        message: accepted === 0 ? `No held tool of '${outcome.service_name}' was accepted` : `Accepted ${accepted} tool change(s) of '${outcome.service_name}'`,
        ...outcome
      }
    })
  )
