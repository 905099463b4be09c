# Stand-in for a cloud bucket module: the same variables, no provider.

variable "region" {
  type = string
}

variable "versioning" {
  type = bool
}

variable "force_destroy" {
  type = bool
}

variable "storage_class" {
  type = string
}

variable "lifecycle_rules" {
  type = list(object({
    id             = string
    prefix         = optional(string, "")
    expirationDays = optional(number)
  }))
}

variable "tags" {
  type = map(string)
}

resource "terraform_data" "bucket" {
  input = {
    region        = var.region
    versioning    = var.versioning
    storage_class = var.storage_class
    tags          = var.tags
  }
}

output "bucket_arn" {
  value = "arn:aws:s3:::${terraform_data.bucket.id}"
}

output "bucket_domain_name" {
  value = "${terraform_data.bucket.id}.s3.${var.region}.amazonaws.com"
}

output "received" {
  value = {
    region          = var.region
    versioning      = var.versioning
    force_destroy   = var.force_destroy
    storage_class   = var.storage_class
    lifecycle_rules = var.lifecycle_rules
    tags            = var.tags
  }
}
