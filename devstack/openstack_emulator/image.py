"""Glance v2, read-only: the image list and image details discovery needs.

Follows the Image API v2 reference: ``GET /v2/images`` pages by ``limit``/``marker`` with a
``next`` link in the body (Glance's own style, not ``images_links``), filters by ``name``,
``status`` and ``visibility``; errors are plain 404s. Images are seeded, never uploaded.
"""

from __future__ import annotations

from typing import Any

from devstack.openstack_emulator.api import ID, Reply, Request, Route, Service
from devstack.openstack_emulator.cloud import ApiFault, Resource


class Image(Service):
    type = "image"
    max_limit = 25  # Glance's default page size (limit_param_default)

    def fault_body(self, fault: ApiFault) -> Any:
        return {"code": fault.status, "title": "Error", "message": fault.message}

    def routes(self) -> list[Route]:
        return [
            Route("GET", "", self.versions, public=True),
            Route("GET", "/versions", self.versions, public=True),
            Route("GET", "/v2/images", self.list_images),
            Route("GET", f"/v2/images/{ID}", self.show_image),
        ]

    def versions(self, request: Request) -> Reply:
        return Reply(
            300 if request.path == "" else 200,
            {
                "versions": [
                    {
                        "id": "v2.16",
                        "status": "CURRENT",
                        "links": [{"rel": "self", "href": f"{request.base_url}/v2/"}],
                    }
                ]
            },
        )

    def list_images(self, request: Request) -> Reply:
        items: list[Resource] = []
        for image in self.cloud.table("images").values():
            if any(
                (wanted := request.arg(name)) is not None and str(image.get(name)) != wanted
                for name in ("name", "status", "visibility")
            ):
                continue
            items.append(image)
        items.sort(key=lambda i: (i["created_at"], i["id"]), reverse=True)
        page, links = self.page(request, items, "images", link_path="/v2/images")
        body: dict[str, Any] = {
            "images": page,
            "first": "/v2/images",
            "schema": "/v2/schemas/images",
        }
        if links:
            body["next"] = links[0]["href"].removeprefix(request.base_url)
        return Reply(200, body)

    def show_image(self, request: Request, image_id: str) -> Reply:
        found = self.cloud.table("images").get(image_id)
        if found is None:
            raise ApiFault(404, f"No image found with ID {image_id}")
        return Reply(200, found)
