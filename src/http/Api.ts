/**
 * The whole HTTP contract: every group composed into one HttpApi, with its errors and its
 * API-level middleware (the API key, the body checks), from which the server, the OpenAPI document
 * and the route table (for the root counts and 405 answers) are all derived.
 */
import * as HttpApi from "@effect/platform/HttpApi"
import * as OpenApi from "@effect/platform/OpenApi"
import { Context, Option } from "effect"
import { AgentApi } from "./agent/Api.js"
import { ApprovalsApi } from "./approvals/Api.js"
import { ApplicationApi, SystemApi } from "./app/Api.js"
import { Authorization, OPEN_ROUTES } from "./authorization.js"
import { RequestBody, type RouteEntry } from "./contract-middleware.js"
import * as E from "./contract-errors.js"
import { MonitoringApi } from "./monitoring/Api.js"
import { finishDocument } from "./openapi.js"
import { BeyondContract } from "./payloads.js"
import { StoreApi } from "./store/Api.js"
import { VERSION } from "../version.js"

/**
 * The document's 400 answers: HttpApi adds its own HttpApiDecodeError to every endpoint, but the
 * contract middleware turns every decode failure into BadRequest, so only BadRequest is documented.
 */
const contractErrorsOnly = (spec: Record<string, any>): Record<string, any> => {
  const decodeError = "#/components/schemas/HttpApiDecodeError"
  for (const item of Object.values(spec.paths ?? {}) as Array<Record<string, any>>) {
    for (const operation of Object.values(item)) {
      const content = operation?.responses?.["400"]?.content?.["application/json"]
      const anyOf: Array<{ $ref?: string }> | undefined = content?.schema?.anyOf
      if (anyOf === undefined || !anyOf.some((s) => s.$ref === decodeError)) continue
      const rest = anyOf.filter((s) => s.$ref !== decodeError)
      content.schema = rest.length === 1 ? rest[0] : { anyOf: rest }
      operation.responses["400"].description = "VALIDATION_ERROR, AMBIGUOUS_TOOL or INVALID_ARGUMENTS"
    }
  }
  for (const name of ["HttpApiDecodeError", "Issue", "PropertyKey"]) delete spec.components?.schemas?.[name]
  return spec
}

/**
 * The document's security as it is applied: HttpApi lists the bearer security once, at the top
 * level, but writes `security: []` into every operation, which in OpenAPI means "open". Those are
 * dropped, so every operation takes the top-level requirement, except the open routes.
 */
const securityAsApplied = (spec: Record<string, any>): Record<string, any> => {
  for (const item of Object.values(spec.paths ?? {}) as Array<Record<string, any>>) {
    for (const operation of Object.values(item)) {
      if (Array.isArray(operation?.security) && operation.security.length === 0) delete operation.security
    }
  }
  for (const route of OPEN_ROUTES) {
    const operation = spec.paths?.[route.path]?.[route.method.toLowerCase()]
    if (operation !== undefined) operation.security = []
  }
  return spec
}

/** Every group, and every contract error any endpoint may answer with. */
export class Api extends HttpApi.make("mcp-store")
  .add(StoreApi)
  .add(AgentApi)
  .add(MonitoringApi)
  .add(ApplicationApi)
  .add(SystemApi)
  .add(ApprovalsApi)
  .addError(E.BadRequest)
  .addError(E.Unauthorized)
  .addError(E.Forbidden)
  .addError(E.NotFound)
  .addError(E.MethodNotAllowed)
  .addError(E.Conflict)
  .addError(E.WaitTimeout)
  .addError(E.PayloadTooLarge)
  .addError(E.UnsupportedMediaType)
  .addError(E.TooMany)
  .addError(E.InternalError)
  .addError(E.BadGateway)
  .addError(E.Unavailable)
  .addError(E.GatewayTimeout)
  // Both run around the whole router (the extra routes and unknown paths too). HttpApiBuilder wraps
  // them in turn, so the last added runs first: the key is checked before the body is read
  // (test/http/authorization.test.ts).
  .middleware(RequestBody)
  .middleware(Authorization)
  .annotate(OpenApi.Title, "mcp-store")
  .annotate(OpenApi.Version, VERSION)
  .annotate(OpenApi.Description, "A store of MCP tool services for AI agents")
  .annotate(OpenApi.Transform, (spec) => finishDocument(securityAsApplied(contractErrorsOnly(spec)))) {}

/**
 * Every route of the HttpApi groups, in declaration order: the contract's 56 endpoints and those the
 * groups serve beyond it (`contract: false`, marked BeyondContract where they are declared).
 */
export const routeTable = (): ReadonlyArray<RouteEntry & { readonly group: string; readonly name: string; readonly contract: boolean }> => {
  const out: Array<RouteEntry & { group: string; name: string; contract: boolean }> = []
  for (const group of Object.values(Api.groups)) {
    for (const endpoint of Object.values(group.endpoints)) {
      const contract = Option.isNone(Context.getOption(endpoint.annotations, BeyondContract))
      out.push({ group: group.identifier, name: endpoint.name, method: endpoint.method, path: endpoint.path, contract })
    }
  }
  return out
}

/** The contract's endpoint counts per group, computed from the route table (never written as literals). */
export const endpointCounts = () => {
  const counts = { store: 0, agent: 0, monitoring: 0, application: 0, system: 0 }
  for (const r of routeTable()) if (r.contract) counts[r.group as keyof typeof counts] += 1
  return counts
}
