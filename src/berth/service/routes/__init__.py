"""The REST routes, one `APIRouter` per resource; `berth.service.app` includes them all."""
