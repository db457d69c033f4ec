/**
 * The contract's errors, in one place: the error classes (one body shape, a real status;
 * docs/api.md, conventions), the one mapping of the store's errors to them (`fromStoreError`, and
 * `contract`, through which a handler runs a store operation). The framework's own failures (bad bodies, unknown routes, decode
 * errors, defects) are turned into these classes by src/http/contract-middleware.ts; a missing or
 * wrong API key by src/http/authorization.ts.
 */
import * as HttpApiSchema from "@effect/platform/HttpApiSchema"
import { Cause, Effect, Schema } from "effect"
import { randomUUID } from "node:crypto"
import type { StoreError } from "../domain/errors.js"

/**
 * The error body of docs/api.md. Each class lists its own codes: that makes the classes tell
 * apart when the API encodes a failure (the union picks the first class that accepts the value).
 */
const errorFields = <const Codes extends ReadonlyArray<string>>(...codes: Codes) => ({
  success: Schema.Literal(false),
  message: Schema.String,
  error: Schema.Struct({
    code: Schema.Literal(...codes),
    message: Schema.String,
    details: Schema.Record({ key: Schema.String, value: Schema.Unknown })
  })
})

type Details = Record<string, unknown>

/** Builds the body fields of an error (the one error body of docs/api.md). */
export const errorBody = <C extends string>(code: C, message: string, details: Details = {}) =>
  ({ success: false as const, message, error: { code, message, details } })

export class BadRequest extends Schema.Class<BadRequest>("BadRequest")(errorFields("VALIDATION_ERROR", "AMBIGUOUS_TOOL", "INVALID_ARGUMENTS"), HttpApiSchema.annotations({ status: 400, description: "VALIDATION_ERROR, AMBIGUOUS_TOOL or INVALID_ARGUMENTS" })) {}
export class Unauthorized extends Schema.Class<Unauthorized>("Unauthorized")(errorFields("UNAUTHORIZED"), HttpApiSchema.annotations({ status: 401, description: "UNAUTHORIZED" })) {}
export class Forbidden extends Schema.Class<Forbidden>("Forbidden")(errorFields("FORBIDDEN", "FORBIDDEN_HOST", "FORBIDDEN_ORIGIN", "TOOL_NOT_ALLOWED", "APPROVAL_DENIED", "CREDENTIALS_REQUIRED"), HttpApiSchema.annotations({ status: 403, description: "FORBIDDEN, FORBIDDEN_HOST, FORBIDDEN_ORIGIN, TOOL_NOT_ALLOWED, APPROVAL_DENIED or CREDENTIALS_REQUIRED" })) {}
export class NotFound extends Schema.Class<NotFound>("NotFound")(errorFields("NOT_FOUND", "SERVICE_NOT_FOUND", "TOOL_NOT_FOUND", "RESOURCE_NOT_FOUND", "PROMPT_NOT_FOUND"), HttpApiSchema.annotations({ status: 404, description: "NOT_FOUND, SERVICE_NOT_FOUND, TOOL_NOT_FOUND, RESOURCE_NOT_FOUND or PROMPT_NOT_FOUND" })) {}
export class Conflict extends Schema.Class<Conflict>("Conflict")(errorFields("TOOL_CHANGED"), HttpApiSchema.annotations({ status: 409, description: "TOOL_CHANGED: the tool's definition changed since it was pinned; held until an operator accepts it" })) {}
export class MethodNotAllowed extends Schema.Class<MethodNotAllowed>("MethodNotAllowed")(errorFields("METHOD_NOT_ALLOWED"), HttpApiSchema.annotations({ status: 405, description: "METHOD_NOT_ALLOWED" })) {}
export class WaitTimeout extends Schema.Class<WaitTimeout>("WaitTimeout")(errorFields("WAIT_TIMEOUT"), HttpApiSchema.annotations({ status: 408, description: "WAIT_TIMEOUT" })) {}
export class PayloadTooLarge extends Schema.Class<PayloadTooLarge>("PayloadTooLarge")(errorFields("PAYLOAD_TOO_LARGE"), HttpApiSchema.annotations({ status: 413, description: "PAYLOAD_TOO_LARGE" })) {}
export class UnsupportedMediaType extends Schema.Class<UnsupportedMediaType>("UnsupportedMediaType")(errorFields("UNSUPPORTED_MEDIA_TYPE"), HttpApiSchema.annotations({ status: 415, description: "UNSUPPORTED_MEDIA_TYPE" })) {}
export class TooMany extends Schema.Class<TooMany>("TooMany")(errorFields("TOO_MANY"), HttpApiSchema.annotations({ status: 429, description: "TOO_MANY: a cap was reached; Retry-After says when to try again" })) {}
export class InternalError extends Schema.Class<InternalError>("InternalError")(errorFields("INTERNAL_ERROR"), HttpApiSchema.annotations({ status: 500, description: "INTERNAL_ERROR: a bug, never bad input" })) {}
export class BadGateway extends Schema.Class<BadGateway>("BadGateway")(errorFields("UPSTREAM_ERROR"), HttpApiSchema.annotations({ status: 502, description: "UPSTREAM_ERROR" })) {}
export class Unavailable extends Schema.Class<Unavailable>("Unavailable")(errorFields("SERVICE_UNAVAILABLE"), HttpApiSchema.annotations({ status: 503, description: "SERVICE_UNAVAILABLE" })) {}
export class GatewayTimeout extends Schema.Class<GatewayTimeout>("GatewayTimeout")(errorFields("TOOL_TIMEOUT", "APPROVAL_TIMEOUT"), HttpApiSchema.annotations({ status: 504, description: "TOOL_TIMEOUT or APPROVAL_TIMEOUT" })) {}

/** Every error an endpoint can answer with. */
export type ApiError =
  | BadRequest
  | Unauthorized
  | Forbidden
  | NotFound
  | MethodNotAllowed
  | Conflict
  | WaitTimeout
  | PayloadTooLarge
  | UnsupportedMediaType
  | TooMany
  | InternalError
  | BadGateway
  | Unavailable
  | GatewayTimeout

export const validationError = (message: string, fields: ReadonlyArray<{ field: string; problem: string }>) =>
  new BadRequest(errorBody("VALIDATION_ERROR", message, { fields }))

export const waitTimeout = (message: string, details: Details) => new WaitTimeout(errorBody("WAIT_TIMEOUT", message, details))

/** Maps a store error to its contract error. */
export const fromStoreError = (e: StoreError): BadRequest | Forbidden | NotFound | Conflict | TooMany | BadGateway | Unavailable | GatewayTimeout => {
  switch (e._tag) {
    case "ValidationError":
      return validationError(e.message, e.problems)
    case "ServiceNotFound":
      return new NotFound(errorBody("SERVICE_NOT_FOUND", e.message, { service_name: e.name, scope: e.scope, suggestions: e.suggestions }))
    case "ToolNotFound":
      return new NotFound(errorBody("TOOL_NOT_FOUND", e.message, { tool_name: e.toolName, scope: e.scope, suggestions: e.suggestions }))
    case "ToolNotAllowed":
      return new Forbidden(errorBody("TOOL_NOT_ALLOWED", e.message, { tool_name: e.toolName, service_name: e.serviceName, scope: e.scope }))
    case "ToolChanged":
      return new Conflict(
        errorBody("TOOL_CHANGED", e.message, {
          tool_name: e.toolName,
          service_name: e.serviceName,
          scope: e.scope,
          change: e.change,
          changed_fields: e.changedFields,
          diff: e.diff
        })
      )
    case "ResourceNotFound":
      return new NotFound(errorBody("RESOURCE_NOT_FOUND", e.message, { uri: e.uri, scope: e.scope }))
    case "PromptNotFound":
      return new NotFound(errorBody("PROMPT_NOT_FOUND", e.message, { prompt_name: e.promptName, scope: e.scope, suggestions: e.suggestions }))
    case "AmbiguousTool":
      return new BadRequest(errorBody("AMBIGUOUS_TOOL", e.message, { tool_name: e.toolName, candidates: e.candidates }))
    case "InvalidArguments":
      return new BadRequest(errorBody("INVALID_ARGUMENTS", e.message, { tool_name: e.toolName, fields: e.problems, upstream: e.upstream }))
    case "UpstreamError":
      return new BadGateway(errorBody("UPSTREAM_ERROR", e.message, { outcome: e.outcome, service_name: e.serviceName, code: e.code ?? null }))
    case "ServiceUnavailable":
      return new Unavailable(
        errorBody("SERVICE_UNAVAILABLE", e.message, {
          service_name: e.serviceName,
          status: e.status,
          next_retry_at: e.nextRetryAt,
          // Seconds until the next reconnection attempt (also the Retry-After header), or null when none is planned.
          retry_after_seconds: e.nextRetryAt === null ? null : Math.max(1, Math.ceil((Date.parse(e.nextRetryAt) - Date.now()) / 1000)),
          last_error: e.lastError
        })
      )
    case "ToolTimeout":
      return new GatewayTimeout(errorBody("TOOL_TIMEOUT", e.message, { tool_name: e.toolName, timeout: e.timeoutSeconds }))
    case "TooMany":
      return new TooMany(errorBody("TOO_MANY", e.message, { limit: e.limit, max: e.max, retry_after_seconds: e.retryAfterSeconds }))
    case "Forbidden":
      return new Forbidden(errorBody("FORBIDDEN", e.message))
    case "ClusterUnavailable":
      return new Unavailable(errorBody("SERVICE_UNAVAILABLE", e.message, { reason: "cluster_unavailable", retry_after_seconds: 1 }))
    case "CredentialsRequired":
      return new Forbidden(errorBody("CREDENTIALS_REQUIRED", e.message, { service_name: e.serviceName, scope: e.scope, headers: e.headers, env: e.env, oauth: e.oauth, missing: e.missing, route: e.route }))
    case "ApprovalRefused": {
      const details = { tool_name: e.toolName, service_name: e.serviceName, approval_id: e.approvalId, decided_by: e.by }
      return e.reason === "denied" ? new Forbidden(errorBody("APPROVAL_DENIED", e.message, details)) : new GatewayTimeout(errorBody("APPROVAL_TIMEOUT", e.message, details))
    }
  }
}

/**
 * A store operation (an Effect) as a handler runs it: its failures, the store's errors, become
 * their contract errors (the one mapping, `fromStoreError`); a defect stays a defect, answered 500
 * with a trace id by the contract middleware.
 */
export const contract = <A, E extends StoreError, R>(operation: Effect.Effect<A, E, R>) => Effect.mapError(operation, fromStoreError)

/**
 * A bug: the details (messages, errno text, file paths) go to the log only, under a trace id; the
 * client gets a generic message with the same id, so an operator can find the log line.
 */
export const logInternal = (what: string, cause: Cause.Cause<unknown>): Effect.Effect<never, InternalError> => {
  const traceId = randomUUID()
  return Effect.logError(`${what} (trace_id ${traceId})`, cause).pipe(
    Effect.zipRight(Effect.fail(new InternalError(errorBody("INTERNAL_ERROR", `Internal error (trace_id ${traceId}); the server log has the details`, { trace_id: traceId }))))
  )
}

/**
 * A contract error as it would be answered: its status and its body (the error body of docs/api.md),
 * for an answer kept to be read later (an asynchronous call's).
 */
export const answerOfError = (e: ApiError): { readonly http_status: number; readonly body: ReturnType<typeof errorBody> } => ({
  http_status: HttpApiSchema.getStatusError(e.constructor as unknown as Schema.Schema.Any),
  body: { success: false, message: e.message, error: e.error }
})
