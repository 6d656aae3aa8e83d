"""Plug-ins that let other training frameworks use yolo_data's datasets and loaders."""
