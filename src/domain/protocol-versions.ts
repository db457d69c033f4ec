/**
 * The MCP protocol revisions the store speaks with its upstream servers: the modern revision
 * (2026-07-28: stateless, `server/discover`, every request carrying its version in `_meta`) and the
 * 2025-era revisions (an `initialize` handshake and a session). A definition may pin one of them
 * (`protocol_version`); otherwise the store negotiates the era per service.
 */

/** The modern revision: no handshake, no session. */
export const MODERN_PROTOCOL_VERSION = "2026-07-28"

/** The revisions with an `initialize` handshake, newest first (the first is what the store offers). */
export const LEGACY_PROTOCOL_VERSIONS = ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"] as const

/** Every revision a definition may pin, newest first. */
export const PROTOCOL_VERSIONS = [MODERN_PROTOCOL_VERSION, ...LEGACY_PROTOCOL_VERSIONS] as const

export type ProtocolVersion = (typeof PROTOCOL_VERSIONS)[number]

/** Whether a revision string is of the modern era (2026-07-28 or later: the spec's date order). */
export const isModernVersion = (version: string): boolean => /^\d{4}-\d{2}-\d{2}$/.test(version) && version >= MODERN_PROTOCOL_VERSION
